"""The pure topology core: Ozone's schema files, location checks, Hadoop's table format, script batches, the cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scm_server.node import topology
from scm_server.node.topology import LayerType, SchemaError

NODEGROUP_XML = """<?xml version="1.0"?>
<configuration>
  <layoutversion>1</layoutversion>
  <layers>
    <layer id="datacenter"><prefix></prefix><cost>1</cost><type>ROOT</type></layer>
    <layer id="rack"><prefix>rack</prefix><cost>1</cost><type>InnerNode</type><default>/default-rack</default></layer>
    <layer id="nodegroup"><prefix>ng</prefix><cost>1</cost><type>InnerNode</type>
      <default>/default-nodegroup</default></layer>
    <layer id="node"><prefix></prefix><cost>0</cost><type>Leaf</type></layer>
  </layers>
  <topology><path>/datacenter/rack/nodegroup/node</path><enforceprefix>true</enforceprefix></topology>
</configuration>
"""

NODEGROUP_YAML = """---
topology:
  cost: 1
  prefix:
  type: ROOT
  sublayer:
    - cost: 1
      prefix: rack
      type: InnerNode
      default: /default-rack
      sublayer:
        - cost: 1
          prefix: ng
          type: InnerNode
          default: /default-nodegroup
          sublayer:
            - cost: 0
              prefix:
              type: Leaf
"""


def test_the_built_in_default_schema_is_root_rack_node() -> None:
    schema = topology.parse_schema(topology.DEFAULT_SCHEMA_FILE, topology.DEFAULT_SCHEMA_XML)
    assert [layer.layer_type for layer in schema.layers] == [LayerType.ROOT, LayerType.INNER_NODE, LayerType.LEAF_NODE]
    assert [layer.cost for layer in schema.layers] == [1, 1, 0]
    assert schema.default_location == "/default-rack"
    assert topology.check_served(schema, topology.DEFAULT_SCHEMA_FILE) is schema


@pytest.mark.parametrize(("name", "text"), [("ng.xml", NODEGROUP_XML), ("ng.yaml", NODEGROUP_YAML)])
def test_nodegroup_schemas_are_parsed_then_refused_by_name(name: str, text: str) -> None:
    schema = topology.parse_schema(name, text)
    assert schema.depth == 4
    assert [layer.prefix for layer in schema.inner_layers] == ["rack", "ng"]
    assert schema.default_location == "/default-rack/default-nodegroup"
    with pytest.raises(SchemaError, match=rf"{name} has 4 levels .*serves only the 3-level ROOT/RACK/NODE.*"
                                          r"network-topology-default.xml"):
        topology.check_served(schema, name)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<configuration><layers>", "not well-formed XML"),
        ("<configuration><layers/></configuration>", "no <topology><path>"),
        ("<configuration><layers><layer id='a'><type>ROOT</type><cost>1</cost></layer></layers>"
         "<topology><path>/a/b</path></topology></configuration>", "undefined layer"),
        ("<configuration><layers><layer id='a'><type>Leaf</type><cost>1</cost></layer>"
         "<layer id='b'><type>Leaf</type><cost>0</cost></layer></layers>"
         "<topology><path>/a/b</path></topology></configuration>", "first layer must be of type ROOT"),
        ("<configuration><layers><layer id='a'><type>ROOT</type><cost>x</cost></layer></layers>"
         "<topology><path>/a</path></topology></configuration>", "cost 'x' is not an integer"),
        ("<configuration><layers><layer id='a'><type>Switch</type><cost>1</cost></layer></layers>"
         "<topology><path>/a</path></topology></configuration>", "layer type 'Switch' is not one of"),
    ],
)
def test_malformed_schemas_name_the_problem(text: str, expected: str) -> None:
    with pytest.raises(SchemaError, match=expected):
        topology.parse_schema("bad.xml", text)


def test_yaml_schema_errors() -> None:
    with pytest.raises(SchemaError, match="no top-level 'topology'"):
        topology.parse_schema("s.yaml", "layers: []\n")
    with pytest.raises(SchemaError, match="not valid YAML"):
        topology.parse_schema("s.yml", "topology: [\n")


def test_locations_as_the_default_schema_accepts_them() -> None:
    schema = topology.parse_schema(topology.DEFAULT_SCHEMA_FILE, topology.DEFAULT_SCHEMA_XML)
    assert topology.check_location("/rack1", schema) == ("/rack1", "")
    assert topology.check_location("/rack1/", schema) == ("/rack1", "")
    assert topology.check_location(" /r2 ", schema) == ("/r2", "")
    for bad, why in [("rack1", "does not start with /"), ("/dc1/rack1", "does not have the schema's form /rack"),
                     ("/", "does not have the schema's form"), ("//", "does not have")]:
        location, reason = topology.check_location(bad, schema)
        assert location is None and why in reason


def test_enforced_prefixes() -> None:
    schema = topology.parse_schema("ng.xml", NODEGROUP_XML)
    assert topology.check_location("/rack1/ng1", schema) == ("/rack1/ng1", "")
    assert topology.check_location("/default-rack/default-nodegroup", schema)[0] is not None
    location, reason = topology.check_location("/r1/ng1", schema)
    assert location is None and "lacks the rack prefix 'rack'" in reason


def test_table_file_format() -> None:
    text = "# racks\n10.0.0.1 /rack1\n\n  dn-2.example.com\t/rack2  \nbroken line here\n10.0.0.3\n"
    table, ignored = topology.parse_table(text)
    assert table == {"10.0.0.1": "/rack1", "dn-2.example.com": "/rack2"}
    assert ignored == ["broken line here", "10.0.0.3"]
    assert topology.lookup_table(table, ["10.0.0.1", "10.9.9.9"]) == ["/rack1", "/default-rack"]


@given(st.lists(st.text(min_size=1, max_size=5), max_size=40), st.integers(min_value=1, max_value=7))
def test_script_batches_keep_every_name_in_order_and_respect_the_bound(names: list[str], max_args: int) -> None:
    batches = topology.script_batches(names, max_args)
    assert [n for b in batches for n in b] == names
    assert all(1 <= len(b) <= max_args for b in batches)


def test_script_output_must_give_one_location_per_name() -> None:
    assert topology.parse_script_output("/r1\n/r2\n", 2, "s") == (["/r1", "/r2"], "")
    assert topology.parse_script_output("/r1 /r2", 2, "s")[0] == ["/r1", "/r2"]
    locations, reason = topology.parse_script_output("/r1\n", 2, "/bin/topo")
    assert locations is None and reason == "script /bin/topo returned 1 values when 2 were expected"


def test_cache_keeps_answers_by_name() -> None:
    cache = topology.MappingCache()
    assert cache.uncached(["a", "b", "a"]) == ["a", "b"]
    assert cache.get(["a"]) is None
    cache.store(["a"], ["/r1"])
    assert cache.uncached(["a", "b"]) == ["b"] and cache.get(["a", "a"]) == ["/r1", "/r1"]
    cache.clear()
    assert len(cache) == 0


def test_the_name_resolved_is_the_ip_unless_hostnames_are_used() -> None:
    assert topology.name_to_resolve("10.0.0.1", "dn1", use_hostname=False) == "10.0.0.1"
    assert topology.name_to_resolve("10.0.0.1", "dn1", use_hostname=True) == "dn1"
    assert topology.name_to_resolve("", "dn1", use_hostname=False) == "dn1"

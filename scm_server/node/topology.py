"""Network topology as Ozone resolves it: the schema, the location rules, and the pure halves of Hadoop's mappings.

Ozone's SCMNodeManager asks a Hadoop ``DNSToSwitchMapping`` (``net.topology.node.switch.mapping.impl``) for the
network location of each datanode that registers, by its IP address (or by its hostname when
``hdds.datanode.use.datanode.hostname`` is true), and checks the answer against the network topology schema
(``ozone.scm.network.topology.schema.file``). This module holds everything of that which is a decision:

* :class:`NodeSchema` and :func:`parse_schema`: the schema's layers, read from Ozone's XML or YAML schema text.
  The SCM serves the 3-level ROOT/RACK/NODE schema (``network-topology-default.xml``, built in as
  :data:`DEFAULT_SCHEMA_XML`); a schema of any other depth (the nodegroup schemas) is parsed and refused with
  :func:`check_served`.
* :func:`check_location`: a mapping's answer as the schema accepts it (``/rack1``), or why not.
* :func:`parse_table`: Hadoop's TableMapping file (host-or-IP, whitespace, rack; ``#`` comments).
* :class:`MappingCache`: CachedDNSToSwitchMapping's cache (successful answers only, by name).
* :func:`script_batches` and :func:`parse_script_output`: ScriptBasedMapping's argument batches and the check
  that the script printed one location per name.
* :func:`name_to_resolve`: which of a datanode's names the mapping is asked about.

Nothing here reads files, runs processes or keeps time: :mod:`scm_server.node.topology_mapping` does, and calls
these functions.
"""

from __future__ import annotations

import enum
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import yaml

DEFAULT_RACK = "/default-rack"
PATH_SEPARATOR = "/"
DEFAULT_SCHEMA_FILE = "network-topology-default.xml"

# Ozone's default schema: the root (cost 1), racks (cost 1, default /default-rack), datanodes as leaves (cost 0).
DEFAULT_SCHEMA_XML = """<?xml version="1.0"?>
<configuration>
  <layoutversion>1</layoutversion>
  <layers>
    <layer id="datacenter"><prefix></prefix><cost>1</cost><type>ROOT</type></layer>
    <layer id="rack"><prefix>rack</prefix><cost>1</cost><type>InnerNode</type><default>/default-rack</default></layer>
    <layer id="node"><prefix></prefix><cost>0</cost><type>Leaf</type></layer>
  </layers>
  <topology>
    <path>/datacenter/rack/node</path>
    <enforceprefix>false</enforceprefix>
  </topology>
</configuration>
"""


class SchemaError(ValueError):
    """A topology schema that cannot be read or is not served; the message names what is wrong."""


class LayerType(enum.Enum):
    ROOT = "ROOT"
    INNER_NODE = "InnerNode"
    LEAF_NODE = "Leaf"


@dataclass(frozen=True)
class Layer:
    name: str
    layer_type: LayerType
    cost: int
    prefix: str = ""
    default_name: str = ""


@dataclass(frozen=True)
class NodeSchema:
    """The layers from the root down to the leaf (a datanode), and whether inner names must carry the prefix."""

    layers: tuple[Layer, ...]
    enforce_prefix: bool = False

    @property
    def depth(self) -> int:
        return len(self.layers)

    @property
    def inner_layers(self) -> tuple[Layer, ...]:
        return self.layers[1:-1]

    @property
    def default_location(self) -> str:
        """The location of a datanode nothing placed (``/default-rack`` in the default schema)."""
        parts = [(layer.default_name or f"/default-{layer.name}").strip(PATH_SEPARATOR) for layer in self.inner_layers]
        return PATH_SEPARATOR + PATH_SEPARATOR.join(parts)

    def describe(self) -> str:
        return PATH_SEPARATOR + PATH_SEPARATOR.join(layer.name for layer in self.layers)


def _layer_type(text: str, where: str) -> LayerType:
    for t in LayerType:
        if t.value.lower() == text.strip().lower():
            return t
    valid = ", ".join(t.value for t in LayerType)
    raise SchemaError(f"{where}: layer type {text.strip()!r} is not one of {valid}")


def _check_layers(layers: Sequence[Layer], where: str) -> None:
    if len(layers) < 2:
        raise SchemaError(f"{where}: a schema needs at least a ROOT and a Leaf layer, found {len(layers)} layer(s)")
    if layers[0].layer_type is not LayerType.ROOT:
        raise SchemaError(f"{where}: the first layer must be of type ROOT, not {layers[0].layer_type.value}")
    if layers[-1].layer_type is not LayerType.LEAF_NODE:
        raise SchemaError(f"{where}: the last layer must be of type Leaf, not {layers[-1].layer_type.value}")
    for layer in layers[1:-1]:
        if layer.layer_type is not LayerType.INNER_NODE:
            raise SchemaError(f"{where}: layer {layer.name!r} between ROOT and Leaf must be of type InnerNode")
    for layer in layers:
        if layer.cost < 0:
            raise SchemaError(f"{where}: layer {layer.name!r} has a negative cost {layer.cost}")


def _int(text: str | None, where: str, what: str) -> int:
    try:
        return int((text or "").strip())
    except ValueError:
        raise SchemaError(f"{where}: {what} {text!r} is not an integer") from None


def parse_schema_xml(text: str, where: str = "topology schema") -> NodeSchema:
    """Ozone's XML schema: ``<layers>`` of ``<layer id>`` (prefix, cost, type, default) and the ``<topology>``'s
    ``<path>`` naming them from the root to the leaf."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise SchemaError(f"{where}: not well-formed XML ({exc})") from None
    by_id: dict[str, Layer] = {}
    for el in root.iter("layer"):
        layer_id = el.get("id") or ""
        if not layer_id:
            raise SchemaError(f"{where}: a <layer> without an id attribute")
        by_id[layer_id] = Layer(
            name=layer_id,
            layer_type=_layer_type(el.findtext("type") or "", where),
            cost=_int(el.findtext("cost"), where, f"layer {layer_id!r} cost"),
            prefix=(el.findtext("prefix") or "").strip(),
            default_name=(el.findtext("default") or "").strip(),
        )
    path = (root.findtext("topology/path") or "").strip()
    if not path:
        raise SchemaError(f"{where}: no <topology><path> naming the layers (e.g. /datacenter/rack/node)")
    names = [p for p in path.split(PATH_SEPARATOR) if p]
    missing = [n for n in names if n not in by_id]
    if missing:
        raise SchemaError(f"{where}: the path {path} names undefined layer(s) {', '.join(missing)}")
    enforce = (root.findtext("topology/enforceprefix") or "false").strip().lower() == "true"
    layers = tuple(by_id[n] for n in names)
    _check_layers(layers, where)
    return NodeSchema(layers, enforce)


def parse_schema_yaml(text: str, where: str = "topology schema") -> NodeSchema:
    """Ozone's YAML schema: ``topology`` is the root layer, each layer's ``sublayer`` (a one-item list) the next."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SchemaError(f"{where}: not valid YAML ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("topology"), dict):
        raise SchemaError(f"{where}: no top-level 'topology' mapping")
    layers: list[Layer] = []
    node: object = doc["topology"]
    enforce = bool(doc.get("enforceprefix", False))
    while node is not None:
        if isinstance(node, list):
            if len(node) != 1:
                raise SchemaError(f"{where}: a sublayer must hold exactly one layer, found {len(node)}")
            node = node[0]
        if not isinstance(node, dict):
            raise SchemaError(f"{where}: a layer must be a mapping with cost, prefix, type")
        layer_type = _layer_type(str(node.get("type", "")), where)
        name = str(node.get("id") or node.get("prefix") or layer_type.value.lower())
        layers.append(Layer(
            name=name,
            layer_type=layer_type,
            cost=_int(str(node.get("cost", "")), where, f"layer {name!r} cost"),
            prefix=str(node.get("prefix") or ""),
            default_name=str(node.get("default") or ""),
        ))
        node = node.get("sublayer")
    _check_layers(layers, where)
    return NodeSchema(tuple(layers), enforce)


def parse_schema(file_name: str, text: str) -> NodeSchema:
    """By the file's suffix, as Ozone's NodeSchemaLoader: ``.yaml``/``.yml`` is YAML, anything else XML."""
    if file_name.lower().endswith((".yaml", ".yml")):
        return parse_schema_yaml(text, file_name)
    return parse_schema_xml(text, file_name)


def check_served(schema: NodeSchema, file_name: str) -> NodeSchema:
    """The placement policies work on racks: only a ROOT/InnerNode/Leaf schema (3 levels) is served."""
    if schema.depth != 3:
        raise SchemaError(
            f"ozone.scm.network.topology.schema.file: {file_name} has {schema.depth} levels ({schema.describe()}); "
            f"this SCM serves only the 3-level ROOT/RACK/NODE schema: unset the key or set it to "
            f"{DEFAULT_SCHEMA_FILE}"
        )
    return schema


def check_location(location: str, schema: NodeSchema) -> tuple[str | None, str]:
    """A mapping's answer normalised as Hadoop's NodeBase does (no trailing ``/``), or None and why it is refused:
    it must be absolute and name exactly one node per inner layer (``/rack1`` in the default schema)."""
    text = location.strip()
    if not text.startswith(PATH_SEPARATOR):
        return None, f"network location {location!r} does not start with {PATH_SEPARATOR}"
    text = text.rstrip(PATH_SEPARATOR)
    parts = text.split(PATH_SEPARATOR)[1:]
    inner = schema.inner_layers
    if len(parts) != len(inner) or any(not p for p in parts):
        levels = PATH_SEPARATOR + PATH_SEPARATOR.join(layer.name for layer in inner)
        return None, f"network location {location!r} does not have the schema's form {levels}"
    if schema.enforce_prefix:
        for part, layer in zip(parts, inner, strict=True):
            default = layer.default_name.strip(PATH_SEPARATOR)
            if layer.prefix and not part.startswith(layer.prefix) and part != default:
                return None, f"network location {location!r}: {part!r} lacks the {layer.name} prefix {layer.prefix!r}"
    return text, ""


def parse_table(text: str) -> tuple[dict[str, str], list[str]]:
    """Hadoop's TableMapping file: one ``name location`` pair per line (blank lines and ``#`` comments skipped).
    Returns the table and the lines it ignored (not two columns), which Hadoop logs and skips."""
    table: dict[str, str] = {}
    ignored: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        columns = line.split()
        if len(columns) == 2:
            table[columns[0]] = columns[1]
        else:
            ignored.append(line)
    return table, ignored


def lookup_table(table: Mapping[str, str], names: Sequence[str]) -> list[str]:
    """Each name's location in the table; a name not in it is on ``/default-rack`` (Hadoop's RawTableMapping)."""
    return [table.get(name, DEFAULT_RACK) for name in names]


def script_batches(names: Sequence[str], max_args: int) -> list[list[str]]:
    """ScriptBasedMapping runs the script with at most ``net.topology.script.number.args`` names at a time."""
    step = max(1, max_args)
    return [list(names[i : i + step]) for i in range(0, len(names), step)]


def parse_script_output(output: str, expected: int, script: str) -> tuple[list[str] | None, str]:
    """The script prints one location per name, whitespace-separated; any other count is a failed resolution."""
    tokens = output.split()
    if len(tokens) != expected:
        return None, f"script {script} returned {len(tokens)} values when {expected} were expected"
    return tokens, ""


class MappingCache:
    """CachedDNSToSwitchMapping's cache: successful answers kept by name for the life of the SCM."""

    def __init__(self) -> None:
        self._cache: dict[str, str] = {}

    def uncached(self, names: Iterable[str]) -> list[str]:
        seen: list[str] = []
        for name in names:
            if name not in self._cache and name not in seen:
                seen.append(name)
        return seen

    def store(self, names: Sequence[str], locations: Sequence[str]) -> None:
        for name, location in zip(names, locations, strict=True):
            self._cache[name] = location

    def get(self, names: Sequence[str]) -> list[str] | None:
        if any(n not in self._cache for n in names):
            return None
        return [self._cache[n] for n in names]

    def clear(self) -> None:
        self._cache.clear()

    def __len__(self) -> int:
        return len(self._cache)


def name_to_resolve(ip_address: str, host_name: str, use_hostname: bool) -> str:
    """Ozone's SCMNodeManager resolves a datanode by IP address, or by hostname when
    ``hdds.datanode.use.datanode.hostname`` is true; the other name stands in when the chosen one is empty."""
    first, second = (host_name, ip_address) if use_hostname else (ip_address, host_name)
    return first or second

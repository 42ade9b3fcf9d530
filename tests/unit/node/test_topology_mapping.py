"""Hadoop's mappings with real files and real scripts, the schema checks at start, and racks at registration."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from pathlib import Path

import pytest
from scm_state_harness import make_datanodes, make_scm

from scm_server.cli.output import topology_text
from scm_server.conf import OzoneConfiguration, TopologyConfig
from scm_server.conf.groups import PlacementConfig, SCMConfigurations
from scm_server.exceptions import ConfigError
from scm_server.node import topology_mapping
from scm_server.node.topology import DEFAULT_SCHEMA_XML
from scm_server.node.topology_mapping import (
    KeepReported,
    NetworkLocationResolver,
    ScriptBasedMapping,
    TableMapping,
)
from scm_server.proto import hdds_pb2

SCHEMA = topology_mapping.load_schema("network-topology-default.xml")


def dn(uuid: str, ip: str, host: str, location: str = "") -> hdds_pb2.DatanodeDetailsProto:
    return hdds_pb2.DatanodeDetailsProto(uuid=uuid, ipAddress=ip, hostName=host, networkLocation=location)


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def warnings_naming(caplog: pytest.LogCaptureFixture, uuid: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and uuid in r.getMessage()]


async def test_table_mapping_resolves_by_ip_and_unknown_hosts_get_the_default_rack(tmp_path: Path) -> None:
    table = tmp_path / "topology.table"
    table.write_text("# ip rack\n10.0.0.1 /rack1\n10.0.0.2\t/rack2\ndn3.example /rack3\n")
    resolver = NetworkLocationResolver(TableMapping(str(table)), SCHEMA, use_hostname=False)
    assert await resolver.resolve(dn("u1", "10.0.0.1", "dn1.example")) == "/rack1"
    assert await resolver.resolve(dn("u2", "10.0.0.2", "dn2.example")) == "/rack2"
    assert await resolver.resolve(dn("u3", "10.0.0.3", "dn3.example")) == "/default-rack"  # by IP: not listed
    by_host = NetworkLocationResolver(TableMapping(str(table)), SCHEMA, use_hostname=True)
    assert await by_host.resolve(dn("u3", "10.0.0.3", "dn3.example")) == "/rack3"


async def test_table_read_once_and_cached_until_reloaded(tmp_path: Path) -> None:
    table = tmp_path / "t"
    table.write_text("10.0.0.1 /rack1\n")
    mapping = TableMapping(str(table))
    assert (await mapping.resolve(["10.0.0.1"])).locations == ["/rack1"]
    table.write_text("10.0.0.1 /rack9\n")
    assert (await mapping.resolve(["10.0.0.1"])).locations == ["/rack1"]  # Hadoop reads the file once
    mapping.reload()
    assert (await mapping.resolve(["10.0.0.1"])).locations == ["/rack9"]


async def test_unreadable_table_gives_default_rack_and_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    resolver = NetworkLocationResolver(TableMapping(str(tmp_path / "missing")), SCHEMA, use_hostname=False)
    with caplog.at_level(logging.WARNING):
        assert await resolver.resolve(dn("uuid-a", "10.0.0.1", "a")) == "/default-rack"
    found = warnings_naming(caplog, "uuid-a")
    assert len(found) == 1 and "cannot read the topology table" in found[0] and "/default-rack" in found[0]


async def test_a_location_the_schema_refuses_gives_default_rack_and_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = tmp_path / "t"
    table.write_text("10.0.0.1 /dc1/rack1\n10.0.0.2 rack2\n")
    resolver = NetworkLocationResolver(TableMapping(str(table)), SCHEMA, use_hostname=False)
    with caplog.at_level(logging.WARNING):
        assert await resolver.resolve(dn("uuid-b", "10.0.0.1", "b")) == "/default-rack"
        assert await resolver.resolve(dn("uuid-c", "10.0.0.2", "c")) == "/default-rack"
    assert len(warnings_naming(caplog, "uuid-b")) == 1
    assert "does not start with /" in warnings_naming(caplog, "uuid-c")[0]


async def test_script_mapping_runs_batches_and_caches(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    topo = script(tmp_path, "topo.sh", f'echo "$@" >> {calls}\nfor n in "$@"; do echo "/rack-${{n##*.}}"; done\n')
    mapping = ScriptBasedMapping(str(topo), max_args=2, timeout_s=10)
    result = await mapping.resolve(["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    assert result.locations == ["/rack-1", "/rack-2", "/rack-3"]
    assert calls.read_text().splitlines() == ["10.0.0.1 10.0.0.2", "10.0.0.3"]
    again = await mapping.resolve(["10.0.0.3", "10.0.0.1"])
    assert again.locations == ["/rack-3", "/rack-1"]
    assert len(calls.read_text().splitlines()) == 2  # answered from the cache
    await mapping.resolve(["10.0.0.4"])
    assert calls.read_text().splitlines()[-1] == "10.0.0.4"


async def test_no_script_puts_everyone_on_the_default_rack() -> None:
    assert (await ScriptBasedMapping(None, 100, 10).resolve(["a", "b"])).locations == ["/default-rack"] * 2


async def test_failing_script_gives_default_rack_one_warning_and_is_not_cached(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topo = script(tmp_path, "fail.sh", "echo 'no such host' >&2\nexit 3\n")
    mapping = ScriptBasedMapping(str(topo), 100, 10)
    resolver = NetworkLocationResolver(mapping, SCHEMA, use_hostname=False)
    with caplog.at_level(logging.WARNING):
        assert await resolver.resolve(dn("uuid-f", "10.0.0.1", "f")) == "/default-rack"
    found = warnings_naming(caplog, "uuid-f")
    assert len(found) == 1 and "exited with status 3: no such host" in found[0]
    assert len(mapping.cache) == 0
    wrong_count = script(tmp_path, "two.sh", "echo /r1 /r2\n")
    resolver.mapping = ScriptBasedMapping(str(wrong_count), 100, 10)
    with caplog.at_level(logging.WARNING):
        assert await resolver.resolve(dn("uuid-g", "10.0.0.1", "g")) == "/default-rack"
    assert "returned 2 values when 1 were expected" in warnings_naming(caplog, "uuid-g")[0]


async def test_hanging_script_is_killed_at_the_timeout(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pid_file = tmp_path / "pid"
    topo = script(tmp_path, "hang.sh", f"echo $$ > {pid_file}\nexec sleep 120\n")
    resolver = NetworkLocationResolver(ScriptBasedMapping(str(topo), 100, 0.5), SCHEMA, use_hostname=False)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        location = await asyncio.wait_for(resolver.resolve(dn("uuid-h", "10.0.0.1", "h")), 30)
    assert location == "/default-rack"
    assert time.monotonic() - started < 20
    found = warnings_naming(caplog, "uuid-h")
    assert len(found) == 1 and "did not finish within 0.5s" in found[0] and "killed" in found[0]
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


async def test_not_executable_script_is_a_failed_resolution(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plain = tmp_path / "plain.sh"
    plain.write_text("echo /r1\n")
    os.chmod(plain, 0o644)
    resolver = NetworkLocationResolver(ScriptBasedMapping(str(plain), 100, 5), SCHEMA, use_hostname=False)
    with caplog.at_level(logging.WARNING):
        assert await resolver.resolve(dn("uuid-p", "10.0.0.1", "p")) == "/default-rack"
    assert "cannot run script" in warnings_naming(caplog, "uuid-p")[0]


async def test_unset_mapping_keeps_the_reported_location() -> None:
    resolver = NetworkLocationResolver(KeepReported(), SCHEMA, use_hostname=False)
    assert await resolver.resolve(dn("u", "10.0.0.1", "a", "/rack7/")) == "/rack7"
    assert await resolver.resolve(dn("u", "10.0.0.1", "a")) == "/default-rack"


def conf_of(**values: str) -> OzoneConfiguration:
    return OzoneConfiguration(dict(values))


def test_mapping_chosen_by_short_or_full_name_and_unknown_refused() -> None:
    key = "net.topology.node.switch.mapping.impl"
    assert isinstance(topology_mapping.mapping_from_config(TopologyConfig.from_conf(conf_of())), KeepReported)
    only_file = TopologyConfig.from_conf(conf_of(**{"net.topology.table.file.name": "/t"}))
    assert isinstance(topology_mapping.mapping_from_config(only_file), TableMapping)
    for name in ("ScriptBasedMapping", "org.apache.hadoop.net.ScriptBasedMapping"):
        mapping = topology_mapping.mapping_from_config(TopologyConfig.from_conf(conf_of(**{key: name})))
        assert isinstance(mapping, ScriptBasedMapping)
    with pytest.raises(ConfigError, match=r"net.topology.node.switch.mapping.impl: unknown class 'DNSMapping'; "
                                          r"use one of TableMapping, ScriptBasedMapping"):
        TopologyConfig.from_conf(conf_of(**{key: "DNSMapping"}))
    legacy = TopologyConfig.from_conf(conf_of(**{"dfs.datanode.use.datanode.hostname": "true"}))
    assert legacy.use_datanode_hostname


def test_placement_classes_by_short_or_full_name_and_unknown_refused() -> None:
    full = "org.apache.hadoop.hdds.scm.container.placement.algorithms.SCMContainerPlacementCapacity"
    for name in ("SCMContainerPlacementCapacity", full):
        assert PlacementConfig.from_conf(conf_of(**{"ozone.scm.container.placement.impl": name})).container_placement \
            == full
    with pytest.raises(ConfigError, match=r"ozone.scm.container.placement.ec.impl: unknown class 'Nope'; use one of "
                                          r"SCMContainerPlacementRackAware, SCMContainerPlacementRackScatter, "
                                          r"SCMContainerPlacementCapacity, SCMContainerPlacementRandom"):
        PlacementConfig.from_conf(conf_of(**{"ozone.scm.container.placement.ec.impl": "Nope"}))
    with pytest.raises(ConfigError, match=r"ozone\.scm\.pipeline\.leader-choose\.policy: unknown class"):
        PlacementConfig.from_conf(conf_of(**{"ozone.scm.pipeline.leader-choose.policy": "Leaderless"}))


def test_schema_files_checked_at_start(tmp_path: Path) -> None:
    ng = tmp_path / "network-topology-nodegroup.xml"
    ng.write_text(DEFAULT_SCHEMA_XML.replace(
        '<layer id="node">',
        '<layer id="nodegroup"><prefix>ng</prefix><cost>1</cost><type>InnerNode</type></layer><layer id="node">',
    ).replace("/datacenter/rack/node", "/datacenter/rack/nodegroup/node"))
    with pytest.raises(ConfigError, match=r"ozone.scm.network.topology.schema.file: .*nodegroup.xml has 4 levels"):
        topology_mapping.load_schema(str(ng))
    with pytest.raises(ConfigError, match=r"ozone.scm.network.topology.schema.file: cannot read .*/absent.xml"):
        topology_mapping.load_schema(str(tmp_path / "absent.xml"))
    own = tmp_path / "mine.xml"
    own.write_text(DEFAULT_SCHEMA_XML)
    assert topology_mapping.load_schema(str(own)).depth == 3


async def test_registration_records_the_mapped_rack_and_print_topology_shows_it(tmp_path: Path) -> None:
    table = tmp_path / "racks"
    table.write_text("dn1 /rackA\ndn2 /rackB\n")
    scm = await make_scm(tmp_path / "scm", **{
        "net.topology.table.file.name": str(table), "hdds.datanode.use.datanode.hostname": "true"})
    try:
        dns = make_datanodes(3, racks=3)  # they report /rack1../rack3 themselves; the table decides
        answers = [await d.register(scm) for d in dns]
        assert [a.networkLocation for a in answers] == ["/rackA", "/rackB", "/default-rack"]
        assert [scm.node_manager.require_node(d.uuid).rack for d in dns] == ["/rackA", "/rackB", "/default-rack"]
        nodes = [scm.node_manager.to_node_proto(scm.node_manager.require_node(d.uuid)) for d in dns]
        text = topology_text(nodes)
        assert text.splitlines() == [
            "State = HEALTHY",
            "Location: /default-rack", " 127.0.0.1(dn3)",
            "Location: /rackA", " 127.0.0.1(dn1)",
            "Location: /rackB", " 127.0.0.1(dn2)",
        ]
    finally:
        await scm.stop()


def test_scm_configurations_carry_topology_and_placement() -> None:
    configs = SCMConfigurations.from_conf(conf_of(**{"ozone.metadata.dirs": "/data/metadata"}))
    assert configs.placement.container_placement.endswith("SCMContainerPlacementRackAware")
    assert configs.placement.ec_container_placement.endswith("SCMContainerPlacementRackScatter")
    assert configs.placement.leader_choose_policy.endswith("MinLeaderCountChoosePolicy")
    assert configs.topology.schema_file == "network-topology-default.xml"

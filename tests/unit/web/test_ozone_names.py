"""Our SCM serves Ozone's bean and metric names: every name Apache Ozone 2.2.0's own SCM served when recorded
(data/ozone_scm_metrics.json, recorded from Ozone's jars by tests/ozone_interop/record_scm_metrics.py) is served by
ours, or is listed in ``NOT_SERVED`` with why, and docs/ozone-compatibility.md names it too."""

from __future__ import annotations

import fnmatch
import json
import re
import uuid
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from scm_state_harness import bring_up, make_datanodes, make_scm

from scm_server.ha.ratis_metrics import RatisNames, ratis_group_label
from scm_server.ozone_metrics import (
    NOT_SERVED,
    NOT_SERVED_PROM_PREFIXES,
    Bean,
    not_served,
    prometheus_name,
    render_not_served,
    rpc_activity_bean,
)
from scm_server.proto import hdds_pb2
from scm_server.raft.metrics import RaftMetrics
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from scm_server.server.web import make_app

FIXTURE = json.loads((Path(__file__).parent / "data" / "ozone_scm_metrics.json").read_text())
DOCS = (Path(__file__).resolve().parents[3] / "docs" / "ozone-compatibility.md").read_text()
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{.*\})?\s")


# Where Ozone's metrics record name differs from the bean's name= part (the Prometheus name is built from the record)
RECORDS = {"SCMNodeMetrics": "SCMNodeManager"}


def _record_of(bean: str) -> str:
    name = dict(p.split("=", 1) for p in bean.split(":", 1)[1].split(","))["name"]
    if name.startswith("RpcActivityForPort"):  # Hadoop's RpcMetrics: record "rpc" for every port
        return "rpc"
    return RECORDS.get(name, name)


def _rpc_activity_beans(hostname: str) -> list[Bean]:
    """An RpcActivityForPort bean for each port of the recorded page, with the figures a real (idle) Hadoop RPC
    server of ours keeps (the daemon passes its listeners' the same way)."""
    ports = [int(b.rsplit("RpcActivityForPort", 1)[1]) for b in FIXTURE["jmx"] if "name=RpcActivityForPort" in b]
    return [rpc_activity_bean(port, "StorageContainerLocationProtocolService", hostname,
                              HadoopRpcServer([]).activity()) for port in ports]


def test_fixture_notes_its_source() -> None:
    assert "Apache Ozone 2.2.0" in FIXTURE["source"] and len(FIXTURE["jmx"]) > 20 and len(FIXTURE["prom"]) > 100


def test_prometheus_name_is_the_one_ozones_sink_writes() -> None:
    """Every plain attribute of a recorded Ozone metrics source, named by our rule, is a name Ozone's /prom served.
    (MXBeans and the few sources Ozone's sink leaves out have no name there at all: none of their attributes is.)"""
    prom = set(FIXTURE["prom"])
    checked = 0
    for bean, attrs in FIXTURE["jmx"].items():
        if bean.endswith("name=Rocksdb_scm.db"):
            continue  # RocksDB's per-column-family properties (not served here) keep their case in Ozone's names
        plain = [a for a in attrs if not a.startswith("tag.") and "." not in a and "-" not in a]
        names = {a: prometheus_name(_record_of(bean), a) for a in plain}
        found = [a for a, n in names.items() if n in prom]
        if found:
            assert found == plain, f"{bean}: {sorted(set(plain) - set(found))} are not named as Ozone's sink names them"
            checked += len(found)
    assert checked > 300
    assert prometheus_name("ReplicationManagerMetrics", "InflightReplication") == (
        "replication_manager_metrics_inflight_replication"
    )
    assert prometheus_name("ContainerBalancerMetrics", "DataSizeMovedGB") == "container_balancer_metrics_data_size_moved_gb"
    assert prometheus_name("SCMHAMetrics", "SCMHALeaderState") == "scmha_metrics_scmha_leader_state"


async def _serve(tmp_path: Path) -> tuple[dict[str, dict[str, object]], set[str]]:
    scm = await make_scm(tmp_path)
    try:
        dns = make_datanodes(3)
        await bring_up(scm, dns)
        await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "ozone-names")
        await scm.replication_manager.run_once()
        # Raft's figures under Ratis's names, registered as the Raft-backed HA manager registers them
        scm.metrics_registry.register(RatisNames(RaftMetrics, "scm-1-id", ratis_group_label(str(uuid.uuid4()))))
        app = make_app(scm, {"client_hadoop": "127.0.0.1:9860", "datanode_hadoop": "127.0.0.1:9861"}, scm.conf,
                       extra_beans=_rpc_activity_beans)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            beans = (await (await client.get("/jmx")).json())["beans"]
            prom_text = await (await client.get("/prom")).text()
    finally:
        await scm.stop()
    names = {m.group(1) for line in prom_text.splitlines() if (m := _SAMPLE.match(line))}
    return {b["name"]: b for b in beans}, names


async def test_ours_serves_each_ozone_bean_and_attribute_or_says_why_not(tmp_path: Path) -> None:
    ours, _ = await _serve(tmp_path)
    missing = []
    for bean, attrs in FIXTURE["jmx"].items():
        if not_served(bean, "*") is not None:
            assert bean not in ours or not_served(bean, "*") is None, f"{bean} is served and listed as not served"
            continue
        if bean not in ours:
            missing.append(f"{bean} (the bean)")
            continue
        for attr in attrs:
            served = attr in ours[bean]
            why = not_served(bean, attr)
            if served and why is not None:
                missing.append(f"{bean} {attr}: served, yet listed as not served ({why.why})")
            elif not served and why is None:
                missing.append(f"{bean} {attr}")
    assert not missing, "Ozone names neither served nor listed in NOT_SERVED:\n" + "\n".join(missing)


async def test_ours_serves_each_ozone_prom_name_or_says_why_not(tmp_path: Path) -> None:
    _, ours = await _serve(tmp_path)
    # Ozone's /prom names of the beans (and attributes) we do not serve, by our naming rule
    excused: set[str] = set()
    for bean, attrs in FIXTURE["jmx"].items():
        for attr in attrs:
            if not_served(bean, attr) is not None:
                excused.add(prometheus_name(_record_of(bean), attr.split(".")[0]))
    missing = []
    for name in FIXTURE["prom"]:
        if name in ours or name in excused or any(name.startswith(p) for p, _ in NOT_SERVED_PROM_PREFIXES):
            continue
        if any(fnmatch.fnmatchcase(bean, e.bean) and e.attribute == "*" for e in NOT_SERVED
               for bean in FIXTURE["jmx"] if name.startswith(prometheus_name(_record_of(bean), "")[:-1])):
            continue
        missing.append(name)
    assert not missing, "Ozone /prom names neither served nor excused:\n" + "\n".join(missing)
    # our own names stay beside Ozone's (the chart's dashboard and alert rules use them)
    assert {"scm_is_leader", "scm_containers", "scm_nodes", "scm_safemode"} <= ours
    assert "scm_node_manager_in_service_healthy_nodes" in ours


def test_docs_list_every_name_not_served() -> None:
    """The table (written by `make compat-docs`) is in the docs as generated, with a row per entry."""
    table = render_not_served()
    assert table in DOCS, "docs/ozone-compatibility.md's table of names not served is stale; run: make compat-docs"
    rows = table.splitlines()
    for entry in NOT_SERVED:
        assert any(entry.why.replace("|", "\\|") in row and entry.attribute.split("*")[0] in row for row in rows)
    for prefix, _ in NOT_SERVED_PROM_PREFIXES:
        assert f"| `{prefix}*` |" in table


async def test_a_decommissioning_datanode_is_on_both_pages(tmp_path: Path) -> None:
    """NodeDecommissionMetrics' per-node record (``tag.datanode.1``, ``UnderReplicatedDN.1``): on /jmx as Hadoop
    writes it, on /prom as the record's attributes (a per-record tag labels no series of the bean)."""
    scm = await make_scm(tmp_path)
    try:
        dns = make_datanodes(3)
        await bring_up(scm, dns)
        await scm.decommission_nodes([dns[1].host])
        app = make_app(scm, {}, scm.conf)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            bean = (await (await client.get(
                "/jmx?qry=Hadoop:service=StorageContainerManager,name=NodeDecommissionMetrics")).json())["beans"][0]
            resp = await client.get("/prom")
            prom = await resp.text()
    finally:
        await scm.stop()
    assert bean["tag.datanode.1"] == dns[1].host and bean["DecommissioningMaintenanceNodesTotal"] == 1
    assert "PipelinesWaitingToCloseDN.1" in bean
    assert resp.status == 200
    families = {f.name for f in text_string_to_metric_families(prom)}  # the exposition format parses
    assert "node_decommission_metrics_decommissioning_maintenance_nodes_total" in families
    assert "node_decommission_metrics_decommissioning_maintenance_nodes_total{" in prom
    assert "node_decommission_metrics_pipelines_waiting_to_close_dn_1{" in prom
    assert "datanode_1=" not in prom and "datanode.1" not in prom

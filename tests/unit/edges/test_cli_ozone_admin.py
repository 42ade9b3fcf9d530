"""`ozone-scm admin` commands that speak Ozone's protocols to SCM's Hadoop RPC client port (scm_server/cli/
admin_ozone.py), run with click's runner against a real in-process SCM (stub HA, fake datanodes) whose
location and reconfigure translators listen on loopback from an event loop in a background thread."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from scm_server.cli.main import cli
from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
from scm_server.server.hadoop_rpc.reconfigure_translator import ReconfigureTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.scm_state_harness import bring_up, make_datanodes, make_scm


class Served:
    """The SCM and its Hadoop RPC client port, run on a loop in a thread (the CLI runs its own asyncio.run)."""

    def __init__(self, meta: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="scm-under-test", daemon=True)
        self.thread.start()
        self.scm, self.dns, self.server, self.port = self.run(self._start(meta))

    def run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=30)

    async def _start(self, meta: Path) -> tuple[Any, Any, HadoopRpcServer, int]:
        scm = await make_scm(meta)
        dns = make_datanodes(3)
        await bring_up(scm, dns)
        server = HadoopRpcServer([LocationTranslator(scm, lambda _k: None, "scm-1", "127.0.0.1"),
                                  ReconfigureTranslator(scm)])
        port = await server.start("127.0.0.1", 0)
        return scm, dns, server, port

    def stop(self) -> None:
        async def go() -> None:
            await self.server.stop()
            await self.scm.stop()

        self.run(go())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Served, Any]]:
    s = Served(tmp_path / "meta")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "ozone-site.xml").write_text("<configuration></configuration>")
    runner = CliRunner()

    def admin(*args: str) -> Any:
        return runner.invoke(cli, ["--conf", str(conf), "admin", "--scm", f"127.0.0.1:{s.port}", *args])

    yield s, admin
    s.stop()


def test_usage_decommission_status_balancer_and_upgrade(served: tuple[Served, Any]) -> None:
    s, admin = served
    usage = admin("datanode", "usageinfo", "--most-used", "--count", "2", "--json")
    assert usage.exit_code == 0, usage.output
    rows = json.loads(usage.output)
    assert len(rows) == 2 and all(r["ozoneCapacity"] == 100 << 30 and r["pipelineCount"] >= 1 for r in rows)
    one = admin("datanode", "usageinfo", "--uuid", s.dns[0].uuid)
    assert one.exit_code == 0 and f"ID                      : {s.dns[0].uuid}" in one.output, one.output
    assert admin("datanode", "usageinfo").exit_code != 0  # none of --uuid/--address/-m/-l: a usage error

    none = admin("datanode", "status", "decommission")
    assert none.exit_code == 0 and "Decommission Status: DECOMMISSIONING - 0 node(s)" in none.output
    s.run(s.scm.decommission_nodes([s.dns[1].host]))
    leaving = admin("datanode", "status", "decommission", "--json")
    (node,) = json.loads(leaving.output)
    assert node["uuid"] == s.dns[1].uuid and node["containers"] == {"UnderReplicated": [], "UnClosed": []}

    assert admin("containerbalancer", "status").output.strip() == "ContainerBalancer is Not Running."
    bad = admin("containerbalancer", "start", "--threshold", "100")
    assert bad.exit_code != 0 and "Failure reason: threshold 100 must be a percentage in [0, 100)" in bad.output
    start = admin("containerbalancer", "start", "-t", "5", "-i", "2", "-d", "100", "--exclude-datanodes", "dn9")
    assert start.exit_code == 0 and start.output.strip() == "Container Balancer started successfully.", start.output
    assert admin("containerbalancer", "status").output.strip() == "ContainerBalancer is Running."
    verbose = admin("containerbalancer", "status", "-v").output
    assert "Threshold                                         5" in verbose, verbose
    assert "Number of Iterations                              2" in verbose
    assert "Datanodes Excluded from Balancing                 dn9" in verbose
    assert admin("containerbalancer", "stop").output.strip() == "Container Balancer stopped."
    assert admin("containerbalancer", "status", "-v").output.strip() == "ContainerBalancer is Not Running."
    stop = admin("containerbalancer", "stop")  # main() prints an SCMException as its one line
    assert stop.exit_code != 0
    assert str(stop.exception) == (
        "INTERNAL_ERROR: Expect ContainerBalancer as running state, but running state is actually STOPPED")

    # a cluster that never needed finalizing: Ozone's SCM reports FINALIZATION_DONE, and finalizeupgrade says so
    assert admin("scm", "finalizationstatus").output.strip() == "FINALIZATION_DONE"
    assert admin("scm", "finalizeupgrade").output.splitlines() == ["Upgrade has already been finalized.", "Exiting..."]
    summary = admin("scm", "deletedBlocksTxn", "summary")
    assert "Total number of transactions: 0" in summary.output, summary.output


def test_reconcile_and_reconfig(served: tuple[Served, Any], tmp_path: Path) -> None:
    s, admin = served
    refused = admin("container", "reconcile", "4242")
    assert refused.exit_code != 0
    assert str(refused.exception) == "CONTAINER_NOT_FOUND: Container #4242 not found for reconciliation."

    site = tmp_path / "scm-site.xml"
    site.write_text("<configuration><property><name>hdds.scm.replication.datanode.replication.limit</name>"
                    "<value>5</value></property></configuration>")
    s.scm.conf.add_site_xml(site)
    s.scm.conf.set_site_value("hdds.scm.replication.datanode.replication.limit", "20")  # running: the default
    address = f"127.0.0.1:{s.port}"
    props = admin("reconfig", "--address", address, "properties")
    assert f"SCM: Node [{address}] Reconfigurable properties:" in props.output
    assert "hdds.scm.replication.datanode.replication.limit" in props.output.splitlines()
    assert "no task was found." in admin("reconfig", "--address", address, "status").output
    assert admin("reconfig", "--address", address, "start").exit_code == 0
    deadline = time.monotonic() + 30  # bounded wait for the background task
    status = admin("reconfig", "--address", address, "status").output
    while "finished at" not in status and time.monotonic() < deadline:
        time.sleep(0.01)
        status = admin("reconfig", "--address", address, "status").output
    assert 'SUCCESS: Changed property hdds.scm.replication.datanode.replication.limit\n\tFrom: "20"\n\tTo: "5"' in (
        status), status
    assert s.scm.replication_manager.config.datanode_replication_limit == 5


def test_secure_configuration_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "ozone-site.xml").write_text("<configuration><property><name>ozone.security.enabled</name>"
                                         "<value>true</value></property></configuration>")
    result = CliRunner().invoke(cli, ["--conf", str(conf), "admin", "--scm", "127.0.0.1:1", "containerbalancer",
                                      "status"])
    assert result.exit_code != 0 and "does not serve yet" in result.output, result.output


def test_container_report_suppress_and_unsuppress(served: tuple[Served, Any]) -> None:
    """`admin container report --suppress|--unsuppress <id>...` (SuppressContainer over Hadoop RPC, as `ozone
    admin container report --suppress`): the container is marked, then unmarked; an unknown one is named."""
    s, admin = served
    from scm_server.proto import hdds_pb2

    cid = s.run(s.scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "cli-test")).containerInfo.containerID
    marked = admin("container", "report", "--suppress", str(cid))
    assert marked.exit_code == 0 and marked.output.strip() == f"Suppressed container(s): {cid}", marked.output
    assert s.scm.get_container(cid).suppressed
    unmarked = admin("container", "report", "--unsuppress", str(cid))
    assert unmarked.exit_code == 0 and unmarked.output.strip() == f"Unsuppressed container(s): {cid}"
    assert not s.scm.get_container(cid).suppressed
    unknown = admin("container", "report", "--suppress", "999999")
    assert unknown.exit_code != 0 and "Failed to suppress container(s): 999999" in unknown.output, unknown.output
    both = admin("container", "report", "--suppress", "--unsuppress", str(cid))
    assert both.exit_code == 2 and "not both" in both.output

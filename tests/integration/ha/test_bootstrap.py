"""scm --init / scm --bootstrap semantics (Ozone's StorageContainerManager.scmInit / scmBootstrap) with a real inter-SCM service.

The "running SCM" answering GetScmInfo is a minimal InterSCMProtocolService on a loopback port, so
these tests exercise the real bootstrap client path (gRPC, retries, messages) in about a second.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from scm_server.exceptions import ConfigError
from scm_server.ha import bootstrap
from scm_server.ha.bootstrap import resolve_local_scm, scm_bootstrap, scm_init
from scm_server.metadata import SCMStorageConfig
from scm_server.proto import scm_ha_pb2, scm_ha_pb2_grpc

from .minihost import alloc_ports, make_conf

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

NODES = ["scm1", "scm2", "scm3"]


class _InfoService(scm_ha_pb2_grpc.InterSCMProtocolServiceServicer):
    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self.calls = 0

    async def GetScmInfo(self, request: Any, context: Any) -> scm_ha_pb2.ScmInfoResponseProto:
        self.calls += 1
        return scm_ha_pb2.ScmInfoResponseProto(clusterId=self.cluster_id, scmId="primordial-scm-id")


class FakePeer:
    """An SCM's inter-SCM service answering GetScmInfo, in a background thread's event loop."""

    def __init__(self, port: int, cluster_id: str) -> None:
        self.service = _InfoService(cluster_id)
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = grpc.aio.server()
            scm_ha_pb2_grpc.add_InterSCMProtocolServiceServicer_to_server(self.service, self._server)
            self._server.add_insecure_port(f"127.0.0.1:{self.port}")
            await self._server.start()
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def stop(self) -> None:
        async def stop() -> None:
            assert self._server is not None
            await self._server.stop(0)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def confs(tmp_path: Path) -> dict[str, Any]:
    ports = alloc_ports(NODES)
    return {n: make_conf(tmp_path, NODES, n, ports) for n in NODES} | {"ports": ports}


@pytest.fixture
def no_raft(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    calls: list[tuple[str, str]] = []

    def fake(local: Any, cid: str, sid: str) -> None:
        calls.append((cid, sid))
        local.raft_group_dir(cid).mkdir(parents=True, exist_ok=True)
        (local.raft_group_dir(cid) / "MARK").write_text("x")

    monkeypatch.setattr(bootstrap, "_initialize_raft_group", fake)
    yield calls


def _version(conf: Any) -> SCMStorageConfig:
    return SCMStorageConfig(Path(conf["ozone.metadata.dirs"]))


def test_init_on_primordial_is_idempotent_and_writes_version(confs: dict[str, Any], no_raft: list) -> None:
    assert scm_init(confs["scm1"], security=None)
    v = _version(confs["scm1"])
    assert v.is_initialized and v.scm_ha and v.cluster_id and v.cluster_id.startswith("CID-")
    assert v.primary_scm_node_id == v.scm_id
    assert no_raft == [(v.cluster_id, v.scm_id)]
    assert scm_init(confs["scm1"], "CID-00000000-0000-0000-0000-000000000001", security=None)  # re-run: no-op
    assert _version(confs["scm1"]).cluster_id == v.cluster_id
    assert len(no_raft) == 1


def test_init_with_clusterid_and_bad_clusterid(confs: dict[str, Any], no_raft: list) -> None:
    cid = "3f1b2c4d-1111-2222-3333-444455556666"
    assert scm_init(confs["scm1"], cid, security=None)
    assert _version(confs["scm1"]).cluster_id == f"CID-{cid}"
    fresh = confs["scm1"].copy()
    fresh.set("ozone.metadata.dirs", str(Path(confs["scm1"]["ozone.metadata.dirs"]).parent / "fresh"))
    with pytest.raises(bootstrap.BootstrapError, match="invalid cluster id"):
        scm_init(fresh, "not-a-uuid", security=None)
    assert not _version(fresh).is_initialized


def test_init_is_noop_on_non_primordial_and_bootstrap_noop_on_primordial(
    confs: dict[str, Any], no_raft: list, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    assert scm_init(confs["scm2"], security=None)
    assert not _version(confs["scm2"]).is_initialized
    assert "can only be executed on Primordial SCM" in caplog.text
    assert scm_bootstrap(confs["scm1"], security=None)
    assert not _version(confs["scm1"]).is_initialized
    assert "can only be executed in non-Primordial SCM" in caplog.text


def test_bootstrap_fetches_cluster_id_and_refuses_a_different_one(
    confs: dict[str, Any], no_raft: list, caplog: pytest.LogCaptureFixture
) -> None:
    assert scm_init(confs["scm1"], security=None)
    cid = _version(confs["scm1"]).cluster_id
    assert cid is not None
    peer = FakePeer(confs["ports"]["scm1"]["ozone.scm.grpc.port"], cid)
    try:
        assert scm_bootstrap(confs["scm2"], security=None, rounds=2, rpc_timeout=2)
        v2 = _version(confs["scm2"])
        assert v2.cluster_id == cid and v2.scm_ha and v2.primary_scm_node_id == "primordial-scm-id"
        assert v2.scm_id != _version(confs["scm1"]).scm_id
        assert scm_bootstrap(confs["scm2"], security=None, rounds=2, rpc_timeout=2)  # idempotent
        assert _version(confs["scm2"]).scm_id == v2.scm_id
        # a node initialised into another cluster is refused with Ozone's message
        peer.service.cluster_id = "CID-00000000-0000-0000-0000-00000000beef"
        caplog.set_level(logging.ERROR)
        assert not scm_bootstrap(confs["scm2"], security=None, rounds=1, rpc_timeout=2)
        assert "Could not bootstrap as SCM is already initialized with cluster id" in caplog.text
        # ... and, asked to, says so in one fixed line a Kubernetes termination message carries whole
        term = confs["scm2"].get_str("ozone.metadata.dirs") + "/../termination-log"
        assert not scm_bootstrap(confs["scm2"], security=None, rounds=1, rpc_timeout=2, termination_log=Path(term))
        assert Path(term).read_text() == (
            f"ForeignVolume: this volume holds cluster {cid}; the running SCMs are cluster "
            "CID-00000000-0000-0000-0000-00000000beef\n"
        )
        # ... unless the operator skips the validation (HDDS-5062 workaround, still honoured)
        skip = confs["scm2"].copy()
        skip.set("ozone.scm.skip.bootstrap.validation", True)
        calls = peer.service.calls
        assert scm_bootstrap(skip, security=None, rounds=1, rpc_timeout=2)
        assert peer.service.calls == calls
    finally:
        peer.stop()


def test_bootstrap_without_any_running_scm(confs: dict[str, Any], no_raft: list, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    # never bootstrapped: bounded retries, then a clear failure
    assert not scm_bootstrap(confs["scm3"], security=None, rounds=2, rpc_timeout=0.5)
    assert "could not get the cluster id from any running SCM" in caplog.text
    assert not _version(confs["scm3"]).is_initialized
    # already bootstrapped and nobody answers (all SCMs restarting at once): proceed (HDDS-5062)
    SCMStorageConfig(Path(confs["scm3"]["ozone.metadata.dirs"])).initialize(scm_ha=True)
    assert scm_bootstrap(confs["scm3"], security=None, rounds=2, rpc_timeout=0.5)
    assert "proceeds with its persisted cluster id" in caplog.text


def test_init_and_bootstrap_on_a_single_scm(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # `ozone-scm local up --scms 1` runs both on its only SCM, as on every node of a ring: bootstrap
    # has nothing to fetch and nowhere to fetch it from, which is fine once --init has run.
    from scm_server.conf import OzoneConfiguration

    caplog.set_level(logging.INFO)
    single = OzoneConfiguration({"ozone.metadata.dirs": str(tmp_path), "ozone.scm.names": "127.0.0.1"})
    assert resolve_local_scm(single).node is None and not resolve_local_scm(single).peers
    assert not scm_bootstrap(single, security=None, rounds=1, rpc_timeout=0.5)  # not initialized: a clear failure
    assert "no other SCM is configured to fetch the cluster id from" in caplog.text
    assert not SCMStorageConfig(tmp_path).is_initialized
    assert scm_init(single, security=None)
    cluster_id = SCMStorageConfig(tmp_path).cluster_id
    assert scm_bootstrap(single, security=None, rounds=1, rpc_timeout=0.5)
    assert f"SCM already initialized with cluster id {cluster_id} and no other SCM is configured" in caplog.text
    assert SCMStorageConfig(tmp_path).cluster_id == cluster_id


def test_node_identity(confs: dict[str, Any]) -> None:
    assert resolve_local_scm(confs["scm2"]).node_id == "scm2"
    ambiguous = confs["scm1"].copy()
    ambiguous.unset("ozone.scm.node.id")
    with pytest.raises(ConfigError, match=r"set ozone\.scm\.node\.id"):
        resolve_local_scm(ambiguous)  # every node is on 127.0.0.1
    typo = confs["scm1"].copy()
    typo.unset("ozone.scm.service.ids")
    typo.set("ozone.scm.service.id", "scmservice")
    with pytest.raises(ConfigError, match=r"ozone\.scm\.service\.ids"):
        resolve_local_scm(typo)

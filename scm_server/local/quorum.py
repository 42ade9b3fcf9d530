"""The main job: a 3-SCM HA quorum as separate processes on loopback, with simulated datanodes.

``run_local(num_scms=3, ...)`` (behind ``ozone-scm local run`` / ``make run``):

1. lay out ``./run-data/<scmN>/{conf/ozone-site.xml, metadata, scm.log}`` with one shared Ozone HA
   layout: ``ozone.scm.service.ids``, ``ozone.scm.nodes.<svc>``, ``ozone.scm.address.<svc>.<nid>``,
   per-node ports through suffix keys (``ozone.scm.ratis.port.<svc>.<nid>`` ...), and
   ``ozone.scm.primordial.node.id=scm1`` (process management comes from the edges'
   :class:`scm_server.local.cluster.LocalCluster`);
2. auto-bootstrap exactly as Ozone's Kubernetes example does: run ``scm --init`` AND
   ``scm --bootstrap`` on EVERY node (each skips what does not apply to it), start the primordial
   SCM, then the others (their first start asks the leader to add them: AddSCM);
3. start N simulated datanodes reporting to all SCMs; wait until there is one leader and two
   followers with the same cluster id, every SCM out of safemode;
4. run a block-allocation workload through the failover client; print roles, cluster ids,
   addresses and web pages.

``up`` keeps a small ``run-data/cluster.json`` (directories, ports, last pids) so the cluster
can outlive the command that started it; ``status`` / ``down`` (and ``stop`` / ``start`` /
``restart`` of one member) live in ``local_members`` and find the processes by identity. :class:`HALocalCluster` is also what the
failover tests and ``bench/failover.py`` drive (kill -9 the leader, restart, add a 4th SCM).

It is a developer tool on top of the client and CLI layers (it starts processes and talks to them
only over the network), kept next to the HA code it exercises.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scm_server.client.config import SCMClientConfig
from scm_server.client.ha_admin import HAAdminClient, Roles
from scm_server.client.retryable import is_answer_or_transient, is_transient
from scm_server.client.scm_client import SCMClient
from scm_server.conf import ports
from scm_server.conf.security import secure_hadoop_rpc_problem
from scm_server.exceptions import NotLeaderException
from scm_server.local.cluster import (
    HADOOP_RPC_KEYS,
    SERVICE_ID,
    LocalCluster,
    ScmProcessInfo,
    free_port,
    tail,
    wait_for,
)
from scm_server.local.secure import AdminCertRenewer, SecureSetup
from scm_server.proto import hdds_pb2
from scm_server.security.core import certificates as pki
from scm_server.security.tls import FileClientSecurity

if TYPE_CHECKING:
    from scm_server.datanode_sim.security import DatanodeSecurity

STATE_FILE = "cluster.json"
# The simulated datanodes create the replicas of OPEN/CLOSING containers on their pipelines every so many
# seconds (a real datanode creates one on a client's first write), so `admin container close` reaches CLOSED.
FOLLOW_CONTAINERS = 2.0

# HA settings for local clusters on top of the edges' FAST_SETTINGS.
HA_SETTINGS: dict[str, str] = {
    "ozone.scm.ha.ratis.tick.interval": "100ms",
    "hdds.scmclient.failover.retry.interval": "100ms",
    "hdds.scmclient.failover.max.retry": "100",
}


class HALocalCluster(LocalCluster):
    """``num_scms`` SCM processes forming one HA ring (auto-bootstrap on every node).

    ``secure=True``: security and mutual TLS on (:mod:`scm_server.local.secure` lays out the
    secrets and the admin identity); every client this class makes presents the admin certificate."""

    def __init__(
        self,
        base_dir: Path,
        num_scms: int = 3,
        *,
        settings: Mapping[str, str] | None = None,
        secure: bool = False,
        key_spec: pki.KeySpec | None = None,
        ca_mode: str = "scm",
        hadoop_rpc: bool = False,
        port_picker: Callable[[], int] = free_port,
    ) -> None:
        self.secure = SecureSetup(Path(base_dir), spec=key_spec, ca_mode=ca_mode) if secure else None
        secure_settings = self.secure.settings() if self.secure is not None else {}
        if hadoop_rpc and secure:
            problem = secure_hadoop_rpc_problem({**secure_settings, **(settings or {})})
            if problem is not None:
                raise ValueError(problem)
        super().__init__(base_dir, num_scms, settings={**HA_SETTINGS, **secure_settings, **(settings or {})},
                         port_picker=port_picker)
        self.security_ports: dict[str, int] = {str(s.node_id): self.port_picker() for s in self.scms}
        if self.secure is not None:
            for s in self.scms:
                s.web_ca = self.secure.root_cert
        # every SCM serves Ozone's protocols over Hadoop RPC on Ozone's keys (secure: with Kerberos only);
        # ``hadoop_rpc``: about half of the simulated datanodes speak it (insecure only: they speak SIMPLE)
        self.hadoop_rpc = hadoop_rpc

    HADOOP_RPC_KEYS = HADOOP_RPC_KEYS

    # ---- security ----
    @property
    def client_security(self) -> FileClientSecurity | None:
        """The admin's client certificate (secure clusters, once fetched), else None."""
        if self.secure is None or not self.secure.ready:
            return None
        if self._client_security is None:
            self._client_security = self.secure.client_security()
        return self._client_security

    _client_security: FileClientSecurity | None = None

    def common_settings(self) -> dict[str, str]:
        values = super().common_settings()
        if self.secure is not None:
            for s in self.scms:
                values[f"{ports.SECURITY_GRPC.port_key}.{SERVICE_ID}.{s.node_id}"] = str(self.security_port(s.node_id))
        return values

    def security_port(self, node_id: str | None) -> int:
        key = str(node_id)
        if key not in self.security_ports:
            self.security_ports[key] = self.port_picker()
        return self.security_ports[key]

    def port_slots(self, s: ScmProcessInfo) -> dict[str, int]:
        slots = super().port_slots(s)
        if self.secure is not None:
            slots["security"] = self.security_port(s.node_id)
        return slots

    def port_key(self, s: ScmProcessInfo, port: int) -> str:
        if self.secure is not None and port == self.security_port(s.node_id):
            return ports.SECURITY_GRPC.port_key
        return super().port_key(s, port)

    def set_port(self, s: ScmProcessInfo, slot: str, port: int) -> None:
        if slot == "security":
            self.security_ports[str(s.node_id)] = port
        else:
            super().set_port(s, slot, port)

    def ports_changed(self) -> None:
        super().ports_changed()
        if self.secure is not None and self.secure.ready:
            self.secure.write_admin_conf(self.common_settings())  # the admin client's list of SCM addresses

    @property
    def security_addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.security_port(s.node_id)}" for s in self.scms]

    def _secure_after_primordial(self) -> None:
        """The admin certificate (signed by the primordial at --init) and the admin client config."""
        if self.secure is None:
            return
        primordial = self.scms[0]
        self.secure.fetch_admin_certificate(self.security_addresses[0], primordial.metadata_dir)
        self.secure.write_admin_conf(self.common_settings())
        self.start_admin_renewer()

    admin_renewer: AdminCertRenewer | None = None

    def admin_cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``ozone-scm --conf <admin conf> args...`` (secure clusters) to completion."""
        assert self.secure is not None
        return subprocess.run(
            [*self.launcher, self.python, "-m", "scm_server.cli.main", "--conf", str(self.secure.admin_conf_dir),
             *args],
            capture_output=True, text=True, timeout=timeout, env=self._env(),
        )

    def start_admin_renewer(self) -> AdminCertRenewer | None:
        """Keep the admin certificate renewed from now until :meth:`stop_all` (see AdminCertRenewer)."""
        if self.secure is None or self.secure.ca_mode == "operator":  # the operator's admin certificate lives a year
            return None
        from scm_server.conf import OzoneConfiguration
        from scm_server.conf.security import SecurityConfig

        config = SecurityConfig.from_conf(OzoneConfiguration(self.settings))
        if self.admin_renewer is None:
            self.admin_renewer = AdminCertRenewer(
                self.secure.admin_cert, lambda: self.admin_cli("admin", "cert", "renew"),
                grace=config.renew_grace_duration, interval=config.renew_check_interval.total_seconds(),
            )
        self.admin_renewer.start()
        return self.admin_renewer

    def stop_all(self) -> None:
        if self.admin_renewer is not None:
            self.admin_renewer.stop()
        super().stop_all()

    def datanode_security(self) -> DatanodeSecurity | None:
        if self.secure is None:
            return None
        from scm_server.conf import OzoneConfiguration
        from scm_server.conf.security import SecurityConfig
        from scm_server.datanode_sim.security import DatanodeSecurity as DNSecurity

        config = SecurityConfig.from_conf(OzoneConfiguration(self.settings))
        return DNSecurity(
            base_dir=self.secure.datanodes_dir,
            security_addresses=self.security_addresses,
            secret=self.secure.secret_file("datanode").read_text().strip().encode(),
            roots=(pki.load_certificate(self.secure.root_cert.read_bytes()),) if self.secure.ready else (),
            spec=self.secure.spec,
            renew_grace=config.renew_grace_duration,
            renew_check_interval=config.renew_check_interval.total_seconds(),
            config=config,
        )

    def reuse_ports(self) -> bool:
        """Take the ports recorded in ``cluster.json`` (a kept data dir): the Raft configuration in
        the log names the peers' Raft addresses, so a restarted ring must keep them."""
        path = self.base_dir / STATE_FILE
        if not path.exists():
            return False
        state = json.loads(path.read_text())
        recorded = {s["node_id"]: s for s in state.get("scms", [])}
        for s in self.scms:
            r = recorded.get(s.node_id)
            if r is None or "ports" not in r:
                continue
            for protocol, address in (r.get("hadoop_rpc") or {}).items():
                s.hadoop_ports[protocol] = int(address.rsplit(":", 1)[1])
            for attr, port in recorded_ports(r["ports"]).items():
                if attr == "security_port":
                    self.security_ports[str(s.node_id)] = int(port)
                else:
                    setattr(s, attr, int(port))
        return True

    # ---- auto-bootstrap ----
    def init_and_bootstrap(self, index: int, timeout: float = 120.0) -> None:
        """``scm --init`` and ``scm --bootstrap`` on one node, as an init container would."""
        s = self.scms[index]
        for step in ("--init", "--bootstrap"):
            result = self.cli(s, "scm", step, timeout=timeout)
            if result.returncode != 0:
                raise RuntimeError(
                    f"`ozone-scm scm {step}` on {s.node_id} failed (exit {result.returncode}):\n"
                    f"{result.stderr.strip()[-2000:]}"
                )

    def start_node(self, index: int, extra_env: Mapping[str, str] | None = None) -> ScmProcessInfo:
        """Init + bootstrap (idempotent) then start the daemon."""
        self.init_and_bootstrap(index)
        return super().start(index, extra_env)

    def _prepare_security(self) -> None:
        if self.secure is None:
            return
        self.secure.prepare()
        for s in self.scms:
            self.node_settings.setdefault(str(s.node_id), {}).update(self.secure.node_settings(str(s.node_id)))

    def start_quorum(self, timeout: float = 90.0) -> None:
        self._prepare_security()
        self.write_configs()
        self.start_node(0)
        self.wait_serving(0, timeout)
        self._secure_after_primordial()
        # one member at a time, each serving before the next bootstraps (as the operator adds them): a
        # bootstrap whose sub-CA the leader signs needs Raft commits, which stall while the previous
        # joiner is a voter that has not started serving yet (a ring of two needs both)
        for i in range(1, self.num_scms):
            self.start_node(i)
            self.wait_serving(i, timeout)

    def restart(self, index: int, sig: int = signal.SIGKILL) -> None:
        self.kill(index, sig)
        self.start_node(index)

    def is_running(self, index: int) -> bool:
        p = self.scms[index].proc
        return p is not None and p.poll() is None

    def add_scm(self) -> int:
        """Grow the ring by one SCM (a new node id, config rewritten everywhere, then bootstrapped)."""
        i = len(self.scms)
        node_id = f"scm{i + 1}"
        root = self.base_dir / node_id
        self.scms.append(
            ScmProcessInfo(
                node_id=node_id, conf_dir=root / "conf", metadata_dir=root / "metadata",
                client_port=self.port_picker(), block_port=self.port_picker(), datanode_port=self.port_picker(),
                http_port=self.port_picker(), ratis_port=self.port_picker(), grpc_port=self.port_picker(),
                log_path=root / "scm.log", hadoop_ports={p: self.port_picker() for p in HADOOP_RPC_KEYS},
            )
        )
        self.num_scms += 1
        self._prepare_security()  # CA mode operator: the new SCM's sub-CA, issued outside the cluster
        self.write_configs()  # running SCMs keep their loaded config; the Raft conf carries the new peer
        self.start_node(i)
        return i

    # ---- addresses ----
    @property
    def grpc_addresses(self) -> list[str]:
        return [s.grpc_address for s in self.scms]

    def running_grpc_addresses(self) -> list[str]:
        return [s.grpc_address for i, s in enumerate(self.scms) if self.is_running(i)]

    # ---- observation (async, over the network) ----
    async def roles(self) -> Roles:
        """Every running SCM asked at once; each role as that SCM reports it (see HAAdminClient.roles)."""
        async with HAAdminClient(self.running_grpc_addresses(), rounds=1, security=self.client_security) as c:
            return await c.roles()

    async def node_views(self) -> list[dict[str, Any]]:
        """Each running SCM's own view: cluster id, scm id, leader, term, applied index."""
        out: list[dict[str, Any]] = []
        for i, s in enumerate(self.scms):
            if not self.is_running(i):
                continue
            try:
                async with HAAdminClient([s.grpc_address], rounds=1, timeout=3, security=self.client_security) as c:
                    info = await c.scm_info()
                    roles = await c._any(lambda st: st.GetScmRatisRoles(_roles_req(), timeout=3))
            except Exception as exc:  # that SCM's refusal or absence is its view; a harness error is raised
                if not is_answer_or_transient(exc):
                    raise
                out.append({"index": i, "node": s.node_id, "error": str(exc)})
                continue
            out.append({
                "index": i, "node": s.node_id, "clusterId": info.clusterId, "scmId": info.scmId,
                "leaderId": info.leaderId, "term": info.term, "applied": roles.appliedIndex,
                "commit": roles.commitIndex, "isLeader": bool(info.leaderId) and info.leaderId == info.scmId,
            })
        return out

    async def leader_index(self) -> int | None:
        views = await self.node_views()
        leaders = [v["index"] for v in views if v.get("isLeader")]
        return leaders[0] if len(leaders) == 1 else None

    async def wait_leader(self, timeout: float = 30.0, exclude: int | None = None) -> int:
        deadline = time.monotonic() + timeout
        while True:
            idx = await self.leader_index()
            if idx is not None and idx != exclude:
                return idx
            if time.monotonic() > deadline:
                raise TimeoutError(f"no single SCM leader within {timeout}s: {await self.node_views()}")
            await asyncio.sleep(0.1)

    async def safe_mode_of(self, index: int) -> bool:
        """That SCM's own safemode state (a local read: a follower answers for itself)."""
        config = SCMClientConfig(max_retries=0, retry_interval=0.1, rpc_timeout=5)
        async with SCMClient(
            [self.scms[index].client_address], config, security=self.client_security, local_read=True
        ) as c:
            return (await c.in_safe_mode()).in_safe_mode

    async def wait_healthy_quorum(self, timeout: float = 120.0) -> list[dict[str, Any]]:
        """One leader, the rest followers, one cluster id, every SCM out of safemode."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                views = await self.node_views()
                ok = (
                    len(views) == sum(self.is_running(i) for i in range(self.num_scms))
                    and all("error" not in v for v in views)
                    and sum(v["isLeader"] for v in views) == 1
                    and len({v["clusterId"] for v in views}) == 1
                    and len({v["leaderId"] for v in views}) == 1
                )
                if ok:
                    safe = [await self.safe_mode_of(v["index"]) for v in views]
                    if not any(safe):
                        return views
                    last = {"views": views, "in_safe_mode": safe}
                else:
                    last = views
            except Exception as exc:  # an SCM not answering yet; anything else is raised at once
                if not is_transient(exc):
                    raise
                last = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"the SCM quorum did not become healthy within {timeout}s; last: {last}")
            await asyncio.sleep(0.3)

    # ---- persisted state for up/status/down ----
    def save_state(self, extra: Mapping[str, Any] | None = None) -> Path:
        state = {
            "base_dir": str(self.base_dir),
            "scms": [
                {
                    "node_id": s.node_id, "pid": s.proc.pid if s.proc else None, "conf_dir": str(s.conf_dir),
                    "metadata_dir": str(s.metadata_dir),
                    "client": s.client_address, "datanode": s.datanode_address, "http": s.http_url,
                    "grpc": s.grpc_address, "ratis": s.ratis_address, "log": str(s.log_path),
                    # every port by transport and Ozone's protocol name: "grpc" are our gRPC services
                    # (ozone.scm.<x>.grpc.port), "hadoop_rpc" Ozone's protocols on Ozone's keys (ozone.scm.<x>.port),
                    # "inter_scm_grpc" ozone.scm.grpc.port (format 1 said client_port/block_port/datanode_port for
                    # the gRPC ports, Ozone's words for its Hadoop RPC ports)
                    "ports": {
                        "grpc": {"client": s.client_port, "block": s.block_port, "datanode": s.datanode_port,
                                 "security": self.security_port(s.node_id)},
                        "hadoop_rpc": dict(s.hadoop_ports),
                        "http": s.http_port, "ratis": s.ratis_port, "inter_scm_grpc": s.grpc_port,
                    },
                    "security": f"{s.host}:{self.security_port(s.node_id)}" if self.secure is not None else "",
                    "hadoop_rpc": {protocol: f"{s.host}:{port}" for protocol, port in s.hadoop_ports.items()},
                }
                for s in self.scms
            ],
            "secure": self.secure is not None,
            "ca_mode": self.secure.ca_mode if self.secure is not None else "",
            "admin_conf": str(self.secure.admin_conf_dir) if self.secure is not None else "",
            **(extra or {}),
        }
        path = self.base_dir / STATE_FILE
        path.write_text(json.dumps(state, indent=2))
        return path


_GRPC_ATTRS = {"client": "client_port", "block": "block_port", "datanode": "datanode_port", "security": "security_port"}
_FORMAT1_ATTRS = ("client_port", "block_port", "datanode_port", "http_port", "ratis_port", "grpc_port", "security_port")


def recorded_ports(ports_record: Mapping[str, Any]) -> dict[str, int]:
    """The ``ports`` of one SCM in cluster.json as ScmProcessInfo attributes (and ``security_port``): the current
    layout (``grpc``/``hadoop_rpc`` by protocol, ``http``, ``ratis``, ``inter_scm_grpc``) or format 1's flat
    ``client_port``... (gRPC ports under Ozone's Hadoop RPC words), so a data dir kept from before still restarts
    on its ports. The Hadoop RPC ports are read from ``hadoop_rpc`` beside it."""
    if "grpc" not in ports_record:
        return {a: int(ports_record[a]) for a in _FORMAT1_ATTRS if a in ports_record}
    out = {_GRPC_ATTRS[p]: int(v) for p, v in ports_record["grpc"].items() if p in _GRPC_ATTRS}
    for key, attr in (("http", "http_port"), ("ratis", "ratis_port"), ("inter_scm_grpc", "grpc_port")):
        if key in ports_record:
            out[attr] = int(ports_record[key])
    return out


def _roles_req() -> Any:
    from scm_server.proto import scm_ha_pb2

    return scm_ha_pb2.ScmRatisRolesRequestProto()


# ---------------------------------------------------------------------------------------------
# run / up / status / down
# ---------------------------------------------------------------------------------------------


Report = Callable[["HALocalCluster", Mapping[str, Any]], None]


async def run_workload(
    cluster: HALocalCluster, num_datanodes: int, blocks: int, hold: bool, racks: int = 2,
    after: Callable[[HALocalCluster], Awaitable[Any]] | None = None,
    report: Report | None = None, say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Datanodes, the allocation workload and the summary (handed to ``report``: the CLI prints it); with ``hold``,
    keep running until SIGINT/SIGTERM."""
    from scm_server.datanode_sim import DatanodeSimulator
    from scm_server.local import throughput

    sim = DatanodeSimulator(
        cluster.datanode_addresses, num_datanodes, heartbeat_interval=0.5, racks=racks,
        admin_addresses=cluster.client_addresses, container_report_interval=30,
        security=cluster.datanode_security(), admin_security=cluster.client_security,
        **hadoop_rpc_datanodes(cluster, num_datanodes), follow_containers=FOLLOW_CONTAINERS,
    )
    await sim.start()
    try:
        views = await cluster.wait_healthy_quorum()
        async with SCMClient(cluster.client_addresses, security=cluster.client_security) as admin:
            await _wait_open_pipelines(admin, 90)
            result, ids = await throughput.bench_allocate_blocks(admin, blocks, 8, 4 * 1024 * 1024)
            containers = sorted({cid for cid, _ in ids})
            for cid in containers:
                await sim.write_to_container(cid, 4 * 1024 * 1024 * 16, 16)
            nodes = await admin.query_nodes()
            pipelines = await admin.list_pipelines()
        roles = await cluster.roles()
        safe_modes = [await cluster.safe_mode_of(v["index"]) for v in views]
        summary = {
            "transports": sim.transports(),
            "security": await security_summary(cluster) if cluster.secure is not None else None,
            "views": await cluster.node_views(),  # after the workload: current applied indexes
            "roles": roles, "blocks": len(ids), "duplicates": len(ids) - len(set(ids)),
            "healthy_datanodes": sum(hdds_pb2.HEALTHY in n.nodeStates for n in nodes),
            "datanodes": len(nodes),
            "open_pipelines": sorted(
                hdds_pb2.ReplicationFactor.Name(p.factor) for p in pipelines if p.state == hdds_pb2.PIPELINE_OPEN
            ),
            "in_safe_mode": safe_modes,
            "containers": len(containers), "ops_per_second": result.ops_per_second,
            "p50_ms": result.percentile(50), "p99_ms": result.percentile(99), "seconds": result.seconds,
        }
        if report is not None:
            report(cluster, summary)
        if after is not None:  # e.g. `local run --audit` (cli/local_audit.py), datanodes still up
            await after(cluster)
        if hold:
            say("\nRunning; press Ctrl-C to stop.")
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        return summary
    finally:
        await sim.stop()


def hadoop_rpc_datanodes(cluster: HALocalCluster, num_datanodes: int) -> dict[str, Any]:
    """The simulator's mixed transports on a cluster serving Hadoop RPC: about half of the datanodes (at least
    one, the last ones) speak Ozone's datanode protocol over Hadoop RPC, the others gRPC."""
    if not cluster.hadoop_rpc or num_datanodes < 1 or cluster.secure is not None:
        return {}
    return {
        "hadoop_rpc_addresses": cluster.hadoop_addresses("datanode"),
        "hadoop_rpc_datanodes": max(1, num_datanodes // 2),
    }


def describe_transports(cluster: HALocalCluster, transports: Mapping[str, list[str]]) -> list[str]:
    """One line per datanode transport: which datanodes, to which SCM ports."""
    by_transport = {
        "grpc": ("gRPC (our datanode protocol)", cluster.datanode_addresses),
        "hadoop-rpc": ("Hadoop RPC (Ozone's StorageContainerDatanodeProtocol)",
                       cluster.hadoop_addresses("datanode") if cluster.hadoop_rpc else cluster.datanode_addresses),
    }
    return [
        f"{by_transport[t][0]}: {', '.join(hosts)} -> {', '.join(by_transport[t][1])}"
        for t, hosts in sorted(transports.items()) if t in by_transport
    ]


async def _wait_open_pipelines(admin: SCMClient, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            pipelines = await admin.list_pipelines()
            if any(p.state == hdds_pb2.PIPELINE_OPEN and p.factor == hdds_pb2.THREE for p in pipelines):
                return
        except Exception as exc:  # no SCM answering, or an election under way: ask again
            if not (is_transient(exc) or isinstance(exc, NotLeaderException)):
                raise
        if time.monotonic() > deadline:
            raise TimeoutError("no OPEN RATIS/THREE pipeline in time")
        await asyncio.sleep(0.3)


async def scm_certificates(security_addresses: list[str], root_file: Path) -> list[dict[str, Any]]:
    """Each SCM's own certificate serial and expiry, asked over its security port."""
    from datetime import UTC, datetime

    from scm_server.security.cert_client import SecurityProtocolClient

    roots = [pki.load_certificate(root_file.read_bytes())]
    out: list[dict[str, Any]] = []
    for address in security_addresses:
        client = SecurityProtocolClient([address], roots=roots, rounds=1, rpc_timeout=3.0)
        try:
            info = await client.scm_info(address)
        except Exception as exc:  # that SCM's refusal or absence is reported; a harness error is raised
            if not is_answer_or_transient(exc):
                raise
            out.append({"address": address, "error": str(exc)})
            continue
        out.append({
            "address": address, "nodeId": info.nodeId, "serial": info.certSerialId,
            "notAfter": datetime.fromtimestamp(info.certNotAfterMs / 1000, UTC).isoformat(timespec="seconds"),
        })
    return out


async def security_summary(cluster: HALocalCluster) -> dict[str, Any]:
    assert cluster.secure is not None
    root = pki.load_certificate(cluster.secure.root_cert.read_bytes())
    certs = await scm_certificates(cluster.security_addresses, cluster.secure.root_cert)
    return {
        "root_serial": str(root.serial_number), "root_sha256": pki.fingerprint(root),
        "admin_conf": str(cluster.secure.admin_conf_dir),
        "scms": [f"{c.get('nodeId', c['address'])}: certificate serial {c.get('serial', '?')}, "
                 f"valid until {c.get('notAfter', c.get('error'))}" for c in certs],
    }


def run_local(
    num_scms: int = 3,
    num_datanodes: int = 5,
    blocks: int = 2000,
    data_dir: Path = Path("run-data"),
    exit_after: bool = False,
    keep_data: bool = False,
    racks: int = 2,
    secure: bool = False,
    ca_mode: str = "scm",
    after: Callable[[HALocalCluster], Awaitable[Any]] | None = None,
    report: Report | None = None,
) -> dict[str, Any]:
    """Start the quorum + datanodes, run the workload, ``report`` the summary, run ``after``; stop unless told to
    hold."""
    import shutil

    if data_dir.exists() and not keep_data:
        shutil.rmtree(data_dir)
    cluster = HALocalCluster(
        data_dir.resolve(), num_scms,
        settings={"hdds.scm.safemode.min.datanode": str(min(num_datanodes, 3))}, secure=secure, ca_mode=ca_mode,
        hadoop_rpc=not secure,  # both transports in the main job (Hadoop RPC is SIMPLE-only: not when secure)
    )
    if keep_data:
        cluster.reuse_ports()
    try:
        cluster.start_quorum()
        cluster.save_state()
        return asyncio.run(run_workload(cluster, num_datanodes, blocks, hold=not exit_after, racks=racks, after=after,
                                        report=report))
    except BaseException:
        for s in cluster.scms:
            if s.log_path.exists():
                print(f"--- {s.node_id} log tail ---\n{tail(s.log_path, 15)}")
        raise
    finally:
        cluster.stop_all()


def up(
    num_scms: int = 3, num_datanodes: int = 5, data_dir: Path = Path("run-data"), secure: bool = False,
    ca_mode: str = "scm", hadoop_rpc: bool | None = None, settings: Mapping[str, str] | None = None,
) -> Path:
    """Start the quorum and a datanode simulator process in the background; record them. ``hadoop_rpc`` (default:
    not ``secure``) serves Ozone's protocols over Hadoop RPC; on a secure ring that needs Kerberos in
    ``settings`` (HALocalCluster refuses it otherwise, naming the keys)."""
    import shutil

    if data_dir.exists():
        raise RuntimeError(f"{data_dir} exists: run `ozone-scm local down` first (or remove it)")
    cluster = HALocalCluster(data_dir.resolve(), num_scms,
                             settings={"hdds.scm.safemode.min.datanode": str(min(num_datanodes, 3)),
                                       **(settings or {})}, secure=secure,
                             ca_mode=ca_mode, hadoop_rpc=(not secure) if hadoop_rpc is None else hadoop_rpc)
    try:
        cluster.start_quorum()
    except BaseException:
        cluster.stop_all()
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    log = (cluster.base_dir / "datanodes.log").open("ab")
    mixed = hadoop_rpc_datanodes(cluster, num_datanodes)
    secure_args: list[str] = []
    if cluster.secure is not None:
        secure_args = ["--conf", str(cluster.secure.admin_conf_dir)]
    sim = subprocess.Popen(
        [cluster.python, "-m", "scm_server.cli.main", *secure_args, "datanode-sim", "--count", str(num_datanodes),
         "--scm", ",".join(cluster.datanode_addresses), "--admin-scm", ",".join(cluster.client_addresses),
         *(["--dn-dir", str(cluster.secure.datanodes_dir)] if cluster.secure is not None else []),
         *([f"--hadoop-rpc-datanodes={mixed['hadoop_rpc_datanodes']}",
            f"--hadoop-rpc-scm={','.join(mixed['hadoop_rpc_addresses'])}"] if mixed else []),
         f"--follow-containers={FOLLOW_CONTAINERS}s"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    path = cluster.save_state({"datanode_sim_pid": sim.pid})
    asyncio.run(cluster.wait_healthy_quorum(timeout=120))
    return path


def load_state(data_dir: Path = Path("run-data")) -> dict[str, Any]:
    from scm_server.local import members as local_members

    try:
        return local_members.load(data_dir).raw
    except local_members.LocalClusterError as exc:
        raise RuntimeError(str(exc)) from exc


def _state_security(state: Mapping[str, Any]) -> tuple[FileClientSecurity | None, Path | None]:
    """The admin identity and root CA file a secure `local up` recorded, else (None, None)."""
    from scm_server.local import members as local_members

    return local_members.state_security(state)


def status(data_dir: Path = Path("run-data")) -> dict[str, Any]:
    """Liveness (by process identity, see ``local_members``), PIDs, roles and, for a secure
    cluster, each SCM's certificate serial and expiry."""
    from scm_server.local import members as local_members

    try:
        result = local_members.status(data_dir)
    except local_members.LocalClusterError as exc:
        raise RuntimeError(str(exc)) from exc
    _security, root_file = _state_security(result["state"])
    if root_file is not None:
        state, alive = result["state"], result["alive"]
        addresses = [s["security"] for s in state["scms"] if alive.get(s["node_id"])]
        certs = asyncio.run(scm_certificates(addresses, root_file))
        result["certificates"] = {c.get("nodeId") or c["address"]: c for c in certs}
    return result


def down(data_dir: Path = Path("run-data")) -> list[str]:
    """Stop every process of the recorded cluster, found by identity (never a reused PID)."""
    from scm_server.local import members as local_members

    try:
        return local_members.down(data_dir)
    except local_members.LocalClusterError as exc:
        raise RuntimeError(str(exc)) from exc


__all__ = ["HALocalCluster", "down", "run_local", "status", "up", "wait_for"]

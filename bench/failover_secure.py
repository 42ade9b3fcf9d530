"""The secure rings of bench/failover_ozone.py (``--secure``): our 3-SCM ring and Apache Ozone 2.2.0's own, each in
secure mode with Ozone's datanodes and OM on it, measured one after the other in the same run.

Each ring is the secure tier's cluster (tests/ozone_secure/secure_procs.py), started from nothing with a KDC of its
own (tests/kerberos/kdc.py: a real MIT KDC on loopback, principals and keytabs made with ``kadmin.local``):
``ozone.security.enabled=true``, Kerberos on every Hadoop RPC connection with ``hadoop.rpc.protection=privacy``,
block and container tokens enforced, gRPC TLS between datanodes; the datanodes and the OM get their certificates
from the ring's CA. Ours: ``ozone-scm scm --init`` / ``--bootstrap`` / ``scm``. Ozone's: ``scm --init`` on the
primordial SCM (its root CA), ``scm --bootstrap`` on the two others (each gets its certificate from the primordial
over Kerberos), as Ozone documents a secure HA ring. The same harness and the same settings drive both.

Per ring:

* **up**: from the start of the ring (the first SCM's init) to the first key acknowledged: the ring, three
  datanodes and the OM started, safe mode left with an open RATIS/THREE pipeline (``ozone admin``, Kerberized),
  then ``ozone sh volume create``, ``bucket create`` and ``key put`` as the user alice after ``kinit``;
* **allocation gap**: ``clients`` callers allocate one block per call over Kerberized Hadoop RPC (the OM's
  principal, the test SASL client of tests/kerberos/sasl_client.py: one connection per caller, following a
  ServerNotLeaderException's hint when it names an SCM of the ring, otherwise the next SCM after 50 ms); each run
  SIGKILLs the SCM that answered the latest allocation and measures from the kill to the first allocation
  answered among calls started after it. Between runs the killed SCM is started again and the ring waited for
  (three members, one leader, in ``ozone admin scm roles``);
* **read back**: after the last SIGKILL (the killed SCM left down) alice puts one more key, and both keys are read
  back byte for byte (block tokens the OM signed before the failover still verify after it). A mismatch fails
  the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import gssapi

from bench.hadoop_load import BLOCK_SIZE, RETRY_INTERVAL, HadoopLoad, gap_after
from scm_server import hadoop_ipc as codec
from scm_server.client.hadoop_rpc import BLOCK_PROTOCOL
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire
from tests.kerberos.kdc import MiniKdc
from tests.kerberos.sasl_client import KerberosClient, ServerFatal
from tests.ozone_interop.ozone_procs import REPO, OzoneCluster, OzoneInteropError, ScmNode, digest, wait_for
from tests.ozone_secure.secure_procs import HOST, USER, SecureOzoneCluster

CALL_TIMEOUT = 10.0
KEY_BYTES = 256 * 1024
VOLUME, BUCKET = "anchorvol", "anchorbucket"
SIDES = {"ours": "ours", "ozone": "Ozone 2.2.0"}
KEPT_LOGS = REPO / "run-data" / "failover-secure"


class KerberosLoad(HadoopLoad):
    """:class:`HadoopLoad` over Kerberized Hadoop RPC, with the SCM that answered the latest allocation."""

    def __init__(self, addresses: list[str], clients: int, ccache: Path) -> None:
        super().__init__(addresses, clients)
        self.ccache = ccache
        self.last_served: str | None = None

    async def _connect(self, address: str) -> KerberosClient:
        client = await KerberosClient.open(int(address.rsplit(":", 1)[1]))
        try:
            await client.authenticate(self.ccache)
        except BaseException:
            client.close()
            raise
        client.send_context(BLOCK_PROTOCOL)
        return client

    async def _run(self, i: int) -> None:
        request = wire_block.SCMBlockLocationRequest(
            cmdType=wire_block.AllocateScmBlock, traceID=f"failover-secure-{i}",
            allocateScmBlockRequest=wire_block.AllocateScmBlockRequestProto(
                size=BLOCK_SIZE, numBlocks=1, owner=f"failover-{i}", type=wire.RATIS, factor=wire.THREE))
        call_ids = itertools.count(1)
        current = i % len(self.addresses)
        client: KerberosClient | None = None
        try:
            while not self._stop.is_set():
                address = self.addresses[current]
                t0 = time.monotonic()
                try:
                    if client is None:
                        client = await self._connect(address)
                    answer = await asyncio.wait_for(
                        client.call(next(call_ids), BLOCK_PROTOCOL, "send", request), CALL_TIMEOUT)
                except (OSError, ConnectionError, ServerFatal, TimeoutError, gssapi.exceptions.GSSError) as exc:
                    self._refused(type(exc).__name__)
                    if client is not None:
                        client.close()
                    client = None
                    current = (current + 1) % len(self.addresses)
                    await asyncio.sleep(RETRY_INTERVAL)
                    continue
                if answer.header.status != codec.Status.SUCCESS:
                    name = answer.header.exceptionClassName
                    self._refused(name.rsplit(".", 1)[-1])
                    if name == codec.SERVER_NOT_LEADER:
                        client.close()
                        client = None
                        hint = codec.suggested_leader(answer.header.errorMsg)
                        if hint is not None and hint in self.addresses:
                            current = self.addresses.index(hint)
                            continue
                        current = (current + 1) % len(self.addresses)
                    await asyncio.sleep(RETRY_INTERVAL)
                    continue
                assert answer.body is not None
                response = wire_block.SCMBlockLocationResponse.FromString(answer.body)
                if not response.success:  # e.g. SAFE_MODE_EXCEPTION from a leader not ready yet
                    self._refused(wire_block.Status.Name(response.status))
                    await asyncio.sleep(0.01)
                    continue
                self.done.append((t0, time.monotonic()))
                self.last_served = address
                for block in response.allocateScmBlockResponse.blocks:
                    cb = block.containerBlockID
                    self.ids.append((cb.containerID, cb.localID))
        finally:
            if client is not None:
                client.close()


def restart_member(cluster: OzoneCluster, scm: ScmNode) -> float:
    """Start a killed SCM of either ring again (its metadata kept); seconds until the ring has three members and one
    leader again (``ozone admin scm roles``)."""
    t0 = time.monotonic()
    if cluster.scm_side == "ours":
        cluster.start_our_scm(scm)
    else:
        cluster.start_scm(scm)
    wait_for(f"{scm.node_id} back in the ring", cluster._ring_complete, 300, interval=1)
    return time.monotonic() - t0


async def failover_runs(cluster: SecureOzoneCluster, runs: int, clients: int, ccache: Path,
                        label: str, loadavg: Any) -> dict[str, Any]:
    by_address = {f"127.0.0.1:{s.block_port}": s for s in cluster.scms}
    load = KerberosLoad(list(by_address), clients, ccache)
    load.start()
    gaps: list[float] = []
    restarts: list[float] = []
    try:
        for run in range(runs):
            await load.steady(count=100, timeout=60)
            assert load.last_served is not None
            leader = by_address[load.last_served]  # the SCM serving allocations right now
            proc = cluster.procs[leader.node_id].popen
            fault_at = time.monotonic()
            os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 30)
            gap = await gap_after(load, fault_at, timeout=180)
            new = by_address[load.last_served]
            print(f"  {label} run {run + 1}/{runs}: SIGKILL {leader.node_id} -> {new.node_id}, "
                  f"allocation gap {gap:.2f} s (load {loadavg()})", flush=True)
            gaps.append(gap)
            if run + 1 < runs:
                restarts.append(await asyncio.to_thread(restart_member, cluster, leader))
    finally:
        await load.stop()
    duplicates = len(load.ids) - len(set(load.ids))
    if duplicates:
        raise AssertionError(f"{label}: {duplicates} duplicate block IDs across failovers")
    return {"gaps": [round(g, 3) for g in gaps], "allocations": len(load.ids), "duplicate_block_ids": 0,
            "failed_attempts": load.refusals, "restart_to_ring_complete_s": [round(r, 1) for r in restarts]}


def put_key(cluster: SecureOzoneCluster, tmp: Path, name: str) -> bytes:
    data = os.urandom(KEY_BYTES)
    src = tmp / f"{name}.in"
    src.write_bytes(data)
    try:
        cluster.sh("key", "put", f"/{VOLUME}/{BUCKET}/{name}", str(src), user=USER, timeout=300)
    except OzoneInteropError as exc:  # a put with no answer: what the CLI said before it was killed
        cause = exc.__cause__
        said = cause.stderr if isinstance(cause, subprocess.TimeoutExpired) else None
        if said:
            text = said.decode(errors="replace") if isinstance(said, bytes) else said
            raise OzoneInteropError(f"{exc}; its stderr ended with:\n{text[-4000:]}") from exc
        raise
    return data


def keep_logs(cluster: SecureOzoneCluster, kdc: MiniKdc, side: str) -> Path:
    """Copy a failed ring's logs (its processes' and its KDC's) under run-data/ (git-ignored) for a look."""
    target = KEPT_LOGS / side
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(cluster.base / "logs", target / "logs", dirs_exist_ok=True)
    with contextlib.suppress(OSError):
        shutil.copy2(kdc.root / "kdc.log", target / "kdc.log")
    return target


def run_ring(side: str, base: Path, classpath: str, runs: int, clients: int, loadavg: Any) -> dict[str, Any]:
    """One secure ring (``side``: "ours" or "ozone") from nothing to its failovers; every process and its KDC
    stopped on return or failure."""
    label = SIDES[side]
    base.mkdir(parents=True, exist_ok=True)
    kdc = MiniKdc.start(base / "kdc")
    saved = {k: os.environ.get(k) for k in kdc.env()}
    os.environ.update(kdc.env())  # our SCMs (Python, MIT Kerberos) read the realm from KRB5_CONFIG
    cluster: SecureOzoneCluster | None = None
    try:
        cluster = SecureOzoneCluster(base / "cluster", classpath, kdc, scm_side=side)
        t0 = time.monotonic()
        cluster.start()  # ring, datanodes, OM; out of safe mode with an open RATIS/THREE pipeline
        ready = time.monotonic() - t0
        cluster.sh("volume", "create", f"/{VOLUME}", user=USER)
        cluster.sh("bucket", "create", f"/{VOLUME}/{BUCKET}", user=USER)
        keys = {"first": put_key(cluster, base, "first")}
        up = time.monotonic() - t0
        print(f"  {label}: ring start -> first key put {up:.1f} s (cluster ready {ready:.1f} s; "
              f"load {loadavg()})", flush=True)
        om_tickets = kdc.kinit(f"om/{HOST}", cluster.keytabs["om"], "om-allocations")
        failover = asyncio.run(failover_runs(cluster, runs, clients, om_tickets, label, loadavg))
        keys["after-failover"] = put_key(cluster, base, "after-failover")
        for name, data in keys.items():
            back = base / f"{name}.out"
            back.unlink(missing_ok=True)
            cluster.sh("key", "get", f"/{VOLUME}/{BUCKET}/{name}", str(back), user=USER, timeout=300)
            if digest(back.read_bytes()) != digest(data):
                raise AssertionError(f"{label}: key {name} read back with other bytes")
        return {"up_s": round(up, 1), "ready_s": round(ready, 1), **failover,
                "keys_read_back": sorted(keys), "steps_s": {k: round(v, 1) for k, v in cluster.timings.steps.items()}}
    except BaseException:
        if cluster is not None:
            with contextlib.suppress(OSError):
                print(f"  {label}: failed; logs kept under {keep_logs(cluster, kdc, side)}", flush=True)
        raise
    finally:
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.stop()
        kdc.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

"""Gray failures with real processes and real signals (issue 11, items 1 and 2).

* A frozen leader (SIGSTOP for 20 s) under a multi-client load: clients fail over within seconds,
  not after the freeze, with Ozone's 15-minute overall deadline left as it is; `admin scm roles`
  answers during the freeze and marks the frozen SCM as not answering.
* Leadership is checked before safemode: a restarted follower (still in safemode) and the survivor
  of a quorum loss answer SCM_NOT_LEADER, not SAFE_MODE_EXCEPTION, to a client pinned to them.

Timings are measured against generous bounds (the machine is shared); the bound that matters is the
contrast with the freeze itself.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import grpc
import grpc.aio
import pytest

from scm_server import call_metadata
from scm_server.client import SCMClient, SCMClientConfig
from scm_server.client.ha_admin import HAAdminClient
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import hdds_pb2, raft_pb2, raft_pb2_grpc, scm_client_pb2, scm_client_pb2_grpc

from .harness import (
    TEST_SETTINGS,
    Workload,
    containers_on,
    start_serving,
    wait_caught_up,
    wait_until,
)

FREEZE_S = 20.0
# Ozone's defaults for the overall deadline; quick rounds as the local cluster configures them.
LOAD_CLIENT = SCMClientConfig(max_retries=15, retry_interval=0.1, rpc_timeout=900.0)


async def _true(value: bool) -> bool:
    return value


async def cli_async(cluster: HALocalCluster, index: int, *args: str, timeout: float = 60) -> tuple[int, str, str, float]:
    """``ozone-scm --conf <scm index conf> args`` without blocking the event loop (the load runs in it)."""
    s = cluster.scms[index]
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scm_server.cli.main", "--conf", str(s.conf_dir), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=cluster._env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode(), err.decode(), time.monotonic() - started


async def test_frozen_leader_costs_clients_seconds_not_the_freeze(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=TEST_SETTINGS)
    sim = None
    frozen = None
    try:
        sim = await start_serving(cluster)
        leader = await cluster.wait_leader(timeout=30)
        work = Workload(cluster.client_addresses, clients=4, config=LOAD_CLIENT)
        work.start()
        await wait_until(lambda: _true(len(work.successes()) >= 200), 60, "200 acknowledged ops before the freeze")
        frozen = cluster.scms[leader].proc
        assert frozen is not None
        stop_at = time.monotonic()
        frozen.send_signal(signal.SIGSTOP)
        # every client is served again within seconds (by the new leader), during the freeze
        await wait_until(lambda: _true(work.first_success_after(stop_at) is not None), 15, "a success during the freeze")
        first = work.first_success_after(stop_at)
        assert first is not None
        new_leader = await cluster.wait_leader(timeout=15, exclude=leader)
        # `admin scm roles` through the frozen SCM's own --conf: answers fast, says who did not answer
        code, out, err, took = await cli_async(cluster, leader, "admin", "scm", "roles", "--json", timeout=30)
        assert code == 0, err
        roles = json.loads(out)
        by_node = {p["node_id"]: p for p in roles["peers"]}
        assert by_node[cluster.scms[leader].node_id]["role"] == "UNKNOWN"
        assert not by_node[cluster.scms[leader].node_id]["answered"]
        assert by_node[cluster.scms[new_leader].node_id]["role"] == "LEADER"
        assert roles["answers"] == 2 and roles["asked"] == 3
        # an admin read through the frozen SCM's --conf is answered by the new leader within seconds
        code2, _, err2, took2 = await cli_async(cluster, leader, "admin", "safemode", "status", timeout=30)
        assert code2 == 0, err2
        remaining = FREEZE_S - (time.monotonic() - stop_at)
        if remaining > 0:
            await asyncio.sleep(remaining)  # the fault itself lasts 20 s (not a wait for a condition)
        # a call that reaches the old leader as it thaws gets NOT_LEADER, never a block from its in-memory
        # ID batch: its lease (a majority heard within an election timeout) ran out during the freeze
        queued = asyncio.ensure_future(_raw_allocate_block(cluster.scms[leader].client_address))
        await asyncio.sleep(0)  # let the call start before the thaw
        frozen.send_signal(signal.SIGCONT)
        cont_at = time.monotonic()
        answer = await queued
        assert isinstance(answer, grpc.aio.AioRpcError), f"the thawed old leader handed out {answer}"
        assert dict(answer.trailing_metadata() or ()).get("x-scm-result") == "SCM_NOT_LEADER", answer
        during = [o for o in work.ops if o.ok and stop_at <= o.end <= cont_at]
        per_client = {o.client for o in during}
        # the worst a successful call waited, for calls in flight at (or started during) the freeze
        waits = [o.end - o.start for o in work.ops if o.ok and o.end >= stop_at and o.start <= cont_at]
        print(f"\nfrozen leader {cluster.scms[leader].node_id} for {FREEZE_S:.0f}s: first client success "
              f"{first - stop_at:.2f}s after SIGSTOP, {len(during)} ops served during the freeze by "
              f"{len(per_client)} clients, longest successful call {max(waits):.2f}s; "
              f"`admin scm roles` {took:.2f}s, `admin safemode status` {took2:.2f}s")
        assert per_client == set(range(work.clients)), "a client made no progress during the freeze"
        assert max(waits) < 8.0, f"a client waited {max(waits):.1f}s in a {FREEZE_S:.0f}s freeze"
        assert first - stop_at < 8.0
        assert took < 10.0 and took2 < 10.0
        # the thawed SCM rejoins as a follower and catches up; nothing was handed out twice
        await wait_caught_up(cluster, timeout=60)
        n = len(work.successes())
        await wait_until(lambda: _true(len(work.successes()) >= n + 100), 60, "progress after the thaw")
        await work.stop()
        work.assert_unique()
        acked = work.acknowledged_containers()
        for i in range(3):
            present = await containers_on(cluster, i, acked)
            assert present == acked, f"{cluster.scms[i].node_id} misses containers {sorted(acked - present)[:10]}"
        frozen = await _leader_cut_off_and_frozen_hands_out_no_ids(cluster)
    finally:
        if frozen is not None and frozen.poll() is None:
            frozen.send_signal(signal.SIGCONT)
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


async def _admin_reads_come_from_the_leader(cluster: HALocalCluster) -> None:
    """Item 7, through the CLI: `--conf` of a follower gets the leader's container report (a follower
    that was never leader has none: "generated at unknown"), and a per-SCM view is explicit and labelled."""
    leader = await cluster.wait_leader(timeout=30)
    follower = next(i for i in range(3) if i != leader)

    async def leader_report_ready() -> bool:
        code, out, _, _ = await cli_async(cluster, leader, "admin", "--scm", cluster.scms[leader].client_address,
                                          "--local", "container", "report", "--json")
        return code == 0 and json.loads(out)["reportTimeStamp"] > 0

    await wait_until(leader_report_ready, 30, "the leader's first ReplicationManager report")
    code, out, err, _ = await cli_async(cluster, follower, "admin", "container", "report", "--json")
    assert code == 0, err
    assert json.loads(out)["reportTimeStamp"] > 0, "a follower answered with its own (empty) report"
    assert "per-SCM view" not in err
    code, out, err, _ = await cli_async(cluster, follower, "admin", "--scm", cluster.scms[follower].client_address,
                                        "--local", "container", "report", "--json")
    assert code == 0, err
    assert json.loads(out)["reportTimeStamp"] == 0  # its own view, and it says so
    assert f"answered by {cluster.scms[follower].node_id}" in err and "FOLLOWER" in err, err
    code, out, err, _ = await cli_async(cluster, follower, "admin", "--scm", cluster.scms[follower].client_address,
                                        "--local", "safemode", "status")
    assert code == 0 and "out of safe mode" in out and "FOLLOWER" in err, (out, err)
    # --local without exactly one --scm address is a usage error
    code, _, err, _ = await cli_async(cluster, follower, "admin", "--local", "safemode", "status")
    assert code == 2 and "--local asks one SCM" in err


async def _retry_on_the_next_leader_is_applied_once(cluster: HALocalCluster) -> None:
    """A client's retry of AllocateContainer (same client id and call id) that reaches the next leader
    after the first copy was applied gets the same container, not a second one (item 1)."""
    leader = await cluster.wait_leader(timeout=30)
    md = call_metadata.request_metadata("retrying-client", 41)
    req = scm_client_pb2.ContainerRequestProto(replicationType=hdds_pb2.RATIS, replicationFactor=hdds_pb2.THREE,
                                               owner="retry")

    async def allocate(index: int) -> int:
        async with grpc.aio.insecure_channel(cluster.scms[index].client_address) as ch:
            stub = scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(ch)
            resp = await stub.AllocateContainer(req, timeout=30, metadata=md)
        return int(resp.containerWithPipeline.containerInfo.containerID)

    async def count() -> int:
        async with SCMClient(cluster.client_addresses, LOAD_CLIENT) as c:
            return (await c.list_containers(0, 1))[1]

    first = await allocate(leader)
    before = await count()
    target = (leader + 1) % 3
    peer = next(v["scmId"] for v in await cluster.node_views() if v["index"] == target)
    async with HAAdminClient(cluster.grpc_addresses, rounds=3) as admin:
        await admin.transfer(peer)
    assert await cluster.wait_leader(timeout=30) == target
    assert await allocate(target) == first, "the retry created a second container on the new leader"
    assert await count() == before
    assert await allocate(target) == first  # and again on the same SCM (its response cache)


async def _leader_cut_off_and_frozen_hands_out_no_ids(cluster: HALocalCluster) -> object:
    """The worst case of a thaw: the leader is cut off from its peers (Raft fault injection) and frozen
    right away, so its check-quorum (which counts ticks, and ticks stop while frozen) has not fired.
    When it thaws it still believes it leads and holds an ID batch in memory; only its wall-clock lease
    tells it a new leader may exist. Returns the process (the caller's finally resumes it)."""
    leader = await cluster.wait_leader(timeout=30)
    address = cluster.scms[leader].client_address
    async with SCMClient([address], LOAD_CLIENT) as c:  # the leader holds an ID batch in memory
        await c.allocate_block(1 << 20, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "batch")
    proc = cluster.scms[leader].proc
    assert proc is not None
    async with grpc.aio.insecure_channel(cluster.scms[leader].ratis_address) as ch:
        admin = raft_pb2_grpc.RaftAdminStub(ch)
        reply = await admin.SetFaults(raft_pb2.SetFaultsRequest(
            rules=[raft_pb2.FaultRule(peer="*", cut_outbound=True, cut_inbound=True)]))
        assert reply.ok, reply.error.message
        proc.send_signal(signal.SIGSTOP)
    try:
        await cluster.wait_leader(timeout=30, exclude=leader)
    finally:
        proc.send_signal(signal.SIGCONT)
    answer = await _raw_allocate_block(address)
    assert isinstance(answer, grpc.aio.AioRpcError), f"the thawed, cut-off old leader handed out {answer}"
    md = dict(answer.trailing_metadata() or ())
    assert md.get("x-scm-result") == "SCM_NOT_LEADER", answer
    async with grpc.aio.insecure_channel(cluster.scms[leader].ratis_address) as ch:
        await raft_pb2_grpc.RaftAdminStub(ch).ClearFaults(raft_pb2.StatusRequest())
    await wait_caught_up(cluster, timeout=60)
    return proc


async def _raw_allocate_block(address: str) -> object:
    """One AllocateScmBlock on a plain channel (no liveness PINGs, long deadline): the answer or the error."""
    req = scm_client_pb2.AllocateScmBlockRequestProto(size=1 << 20, numBlocks=1, type=hdds_pb2.RATIS,
                                                      factor=hdds_pb2.THREE, owner="thaw")
    async with grpc.aio.insecure_channel(address) as ch:
        try:
            return await scm_client_pb2_grpc.ScmBlockLocationProtocolServiceStub(ch).AllocateScmBlock(req, timeout=60)
        except grpc.aio.AioRpcError as err:
            return err


async def _pinned_allocate(address: str) -> BaseException | None:
    """allocate_block and allocate_container on ``address`` only (no failover); the error, if any."""
    config = SCMClientConfig(max_retries=0, retry_interval=0.05, rpc_timeout=10, election_timeout=0.1)
    async with SCMClient([address], config, local_read=True) as c:
        for call in (lambda: c.allocate_block(1 << 20, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "pinned"),
                     lambda: c.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "pinned")):
            try:
                await call()
            except (NotLeaderException, SCMException) as exc:
                return exc
    return None


async def test_leadership_is_checked_before_safemode(tmp_path: Path) -> None:
    # a restarted follower stays in safemode until it caught up and its datanodes re-registered:
    # the datanodes only report to it after a few heartbeats here
    settings = {**TEST_SETTINGS, "hdds.scm.safemode.min.datanode": "3",
                # the leader keeps its datanodes (and pipelines) while the simulator is stopped
                "ozone.scm.stale.node.interval": "60s", "ozone.scm.dead.node.interval": "120s"}
    cluster = HALocalCluster(tmp_path / "c", 3, settings=settings)
    sim = None
    try:
        sim = await start_serving(cluster)
        await _admin_reads_come_from_the_leader(cluster)
        await _retry_on_the_next_leader_is_applied_once(cluster)
        leader = await cluster.wait_leader(timeout=30)
        follower = (leader + 1) % 3
        # 1. a restarted follower, still in safemode: NOT_LEADER (with the leader's address), never SAFE_MODE
        await sim.stop()  # no datanode reports: it cannot leave safemode by itself
        cluster.kill(follower, signal.SIGKILL)
        cluster.start_node(follower)
        cluster.wait_serving(follower, 60)
        assert await cluster.safe_mode_of(follower), "the restarted follower should still be in safemode"

        async def refused_with_hint() -> bool:
            # every answer is NOT_LEADER; once it heard from the leader, the hint names it
            err = await _pinned_allocate(cluster.scms[follower].client_address)
            assert isinstance(err, NotLeaderException), f"restarted follower answered {err!r}"
            return err.leader_address == cluster.scms[leader].client_address

        await wait_until(refused_with_hint, 20, "a NOT_LEADER answer naming the leader")
        assert await cluster.safe_mode_of(follower)
        # the failover client gets its block from the leader (out of safemode)
        async with SCMClient([cluster.scms[follower].client_address], LOAD_CLIENT) as c:
            assert len(await c.allocate_block(1 << 20, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "x")) == 1
        # 2. quorum loss: the survivor steps down (check-quorum) and answers NOT_LEADER, not SAFE_MODE
        others = [i for i in range(3) if i != follower]
        for i in others:
            cluster.kill(i, signal.SIGKILL)

        async def survivor_says_not_leader() -> BaseException | None:
            err = await _pinned_allocate(cluster.scms[follower].client_address)
            return err if isinstance(err, NotLeaderException) else None

        err = await wait_until(survivor_says_not_leader, 30, "the survivor to refuse as not leader")
        assert isinstance(err, NotLeaderException) and err.result is ResultCodes.SCM_NOT_LEADER
        # 3. the quorum comes back: whoever follows, in safemode or not, still says NOT_LEADER
        for i in others:
            cluster.start_node(i)
        for i in others:
            cluster.wait_serving(i, 60)
        new_leader = await cluster.wait_leader(timeout=60)
        for i in range(3):
            if i == new_leader:
                continue
            err = await _pinned_allocate(cluster.scms[i].client_address)
            assert isinstance(err, NotLeaderException), f"follower {cluster.scms[i].node_id} answered {err!r}"

        # 4. `freon stb` while an SCM is down (issue 11, item 9): its datanodes register with the SCMs
        # that answer and the benchmark runs; run through the dead SCM's own --conf
        down = next(i for i in range(3) if i != new_leader)
        cluster.kill(down, signal.SIGKILL)
        started = time.monotonic()
        code, out, err_text, _ = await cli_async(
            cluster, down, "freon", "stb", "--benchmark", "AllocateBlocks", "--num-blocks", "50",
            "--num-threads", "2", "--num-datanodes", "3", "--json", timeout=120,
        )
        took = time.monotonic() - started
        assert code == 0, err_text
        rows = {r["mode"]: r for r in json.loads(out)}
        assert rows["AllocateBlocks"]["operations"] == 50
        print(f"\nfreon stb with {cluster.scms[down].node_id} down: {took:.1f}s")
        assert took < 45, "freon waited for the SCM that is down"
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


pytestmark = [pytest.mark.processes, pytest.mark.timeout(240)]

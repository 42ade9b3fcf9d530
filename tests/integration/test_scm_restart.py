"""kill -9 the SCM in the middle of a multi-client block workload, restart it, keep going.

Every (containerID, localID) any client was ever given is recorded; after the restart no ID
may repeat (the SequenceIdGenerator persisted its batches before handing IDs out) and every
container a client was told about still exists.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from scm_harness import ScmUnderTest

from scm_server.client import SCMClientConfig, SCMUnavailableError, SyncSCMClient
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

WORKERS = 4
BLOCKS_PER_CALL = 5


class Workload:
    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.blocks: list[tuple[int, int]] = []
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(WORKERS)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def count(self) -> int:
        with self.lock:
            return len(self.blocks)

    def _worker(self, n: int) -> None:
        client = SyncSCMClient(
            self.addresses, SCMClientConfig(max_retries=20, retry_interval=0.25, rpc_timeout=10)
        )
        try:
            while not self.stop.is_set():
                try:
                    got = client.allocate_block(
                        1024 * 1024, BLOCKS_PER_CALL, hdds_pb2.RATIS, hdds_pb2.THREE, f"client-{n}"
                    )
                except SCMException as exc:
                    # while the restarted SCM re-elects itself (a ring of one) it is not the leader yet,
                    # then in safemode: both are transient answers of a restart, not failures
                    if exc.result not in (ResultCodes.SAFE_MODE_EXCEPTION, ResultCodes.SCM_NOT_LEADER):
                        with self.lock:
                            self.errors.append(str(exc))
                    self.stop.wait(0.1)  # back-off of the workload loop, not a wait for a condition
                    continue
                except SCMUnavailableError as exc:
                    with self.lock:
                        self.errors.append(str(exc))
                    continue
                with self.lock:
                    self.blocks.extend(
                        (b.containerBlockID.containerID, b.containerBlockID.localID) for b in got
                    )
        finally:
            client.close()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


@pytest.fixture
def scm(tmp_path: Path) -> Iterator[ScmUnderTest]:
    under_test = ScmUnderTest(
        tmp_path, datanodes=4, racks=2, settings={"ozone.scm.sequence.id.batch.size": "100"}
    )
    try:
        yield under_test
    finally:
        under_test.close()


def test_kill_9_mid_workload_never_reissues_ids(scm: ScmUnderTest) -> None:
    scm.wait_ready()
    workload = Workload(scm.cluster.client_addresses)
    workload.start()
    try:
        scm.wait(lambda: workload.count() >= 400, 60, "400 blocks before the crash")
        scm.cluster.kill(0, signal.SIGKILL)
        at_crash = workload.count()
        scm.cluster.start(0)
        scm.cluster.wait_serving(0, timeout=60)
        scm.wait(lambda: workload.count() >= at_crash + 400, 90, "400 more blocks after the restart")
    finally:
        workload.join()
    blocks = workload.blocks
    assert len(blocks) == len(set(blocks)), "a block ID was handed out twice"
    local_ids = [lid for _, lid in blocks]
    assert len(local_ids) == len(set(local_ids)), "a localID was reused"
    containers = sorted({cid for cid, _ in blocks})
    for cid in containers:
        info = scm.client.get_container(cid)
        assert info.containerID == cid and info.state != hdds_pb2.DELETED
    unexpected = [e for e in workload.errors if "cannot reach SCM" not in e]
    assert not unexpected, unexpected[:5]

"""A minimal SCMHAHost for in-process HA tests: real scm.db, transaction buffer, dispatcher,
SCMContext and the real replicated SequenceIdGenerator, without the rest of the SCM facade.

It lets the HA layer (SCMHAManagerImpl + SCMStateMachine + inter-SCM service + RaftServer) be
tested on its own, several SCMs in one event loop on loopback ports.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scm_server.conf import OzoneConfiguration
from scm_server.ha.dispatcher import SCMStateMachineDispatcher
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_ha_manager import SCMHAManagerImpl
from scm_server.ha.scm_service import SCMServiceManager
from scm_server.ha.sequence_id_generator import SequenceIdGenerator, SequenceIdStateManager
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.ports import free_port
from scm_server.proto import scm_ratis_pb2

SERVICE = "scmservice"




def make_conf(root: Path, node_ids: list[str], node: str, ports: dict[str, dict[str, int]], **extra: Any) -> OzoneConfiguration:
    values = {
        "ozone.metadata.dirs": str(root / node),
        "ozone.scm.service.ids": SERVICE,
        f"ozone.scm.nodes.{SERVICE}": ",".join(node_ids),
        "ozone.scm.node.id": node,
        "ozone.scm.primordial.node.id": node_ids[0],
        "ozone.scm.ha.ratis.leader.election.timeout": "500ms",
        "ozone.scm.ha.ratis.tick.interval": "50ms",
        "ozone.scm.ha.ratis.fsync": "false",
    }
    for nid in node_ids:
        values[f"ozone.scm.address.{SERVICE}.{nid}"] = "127.0.0.1"
        for key, port in ports[nid].items():
            values[f"{key}.{SERVICE}.{nid}"] = str(port)
    values.update({k: str(v) for k, v in extra.items()})
    return OzoneConfiguration(values)


def alloc_ports(node_ids: list[str]) -> dict[str, dict[str, int]]:
    keys = ("ozone.scm.ratis.port", "ozone.scm.grpc.port", "ozone.scm.client.grpc.port",
            "ozone.scm.block.client.grpc.port", "ozone.scm.datanode.grpc.port")
    return {nid: {k: free_port() for k in keys} for nid in node_ids}


class MiniHost:
    def __init__(self, conf: OzoneConfiguration, batch_size: int = 10) -> None:
        self.conf = conf
        root = Path(conf["ozone.metadata.dirs"])
        self._storage_config = SCMStorageConfig(root)
        self._store = SCMMetadataStore(root)
        self._buffer = SCMHADBTransactionBuffer(self._store)
        self._dispatcher = SCMStateMachineDispatcher()
        self._context = SCMContext.ratis_follower()
        self._services = SCMServiceManager()
        self.ha = SCMHAManagerImpl(conf, self._storage_config, self._store, terminate=self._terminate)
        self.seq_state = SequenceIdStateManager(self._store, self._buffer, self.ha)
        self.seq = SequenceIdGenerator(self.seq_state, batch_size=batch_size)
        from scm_server.ha.replicate import RequestType

        self._dispatcher.register(RequestType.SEQUENCE_ID, self.seq_state)
        self.fatal: list[str] = []
        self.events: list[str] = []
        self.reinits = 0
        self.backups_served: list[float] = []
        self.ha.attach(self)

    def _terminate(self, status: int, message: str) -> None:
        self.fatal.append(message)

    # SCMHAHost
    @property
    def metadata_store(self) -> SCMMetadataStore:
        return self._store

    @property
    def transaction_buffer(self) -> SCMHADBTransactionBuffer:
        return self._buffer

    @property
    def dispatcher(self) -> SCMStateMachineDispatcher:
        return self._dispatcher

    @property
    def scm_context(self) -> SCMContext:
        return self._context

    @property
    def service_manager(self) -> SCMServiceManager:
        return self._services

    @property
    def storage_config(self) -> SCMStorageConfig:
        return self._storage_config

    def on_become_leader(self, term: int) -> None:
        self._context.update_leader_and_term(True, term)
        self.seq.invalidate_batch()
        self._buffer.flush()
        self.events.append(f"leader:{term}")

    def on_leader_ready(self) -> None:
        self._context.set_leader_ready()
        self.events.append("ready")

    def on_step_down(self, term: int) -> None:
        self._context.update_leader_and_term(False, term)
        self.events.append(f"stepdown:{term}")

    def reinitialize(self) -> None:
        self.seq.reinitialize()
        self.reinits += 1

    @property
    def sequence_batch_size(self) -> int:
        return self.seq.batch_size

    def on_backup_served(self, wall_time_s: float) -> None:
        self.backups_served.append(wall_time_s)

    def set_state_machine_ready_hook(self, ready: Callable[[], bool]) -> None:
        self.state_machine_ready = ready  # no safemode in this host: the check is kept, not enforced

    async def start(self) -> None:
        await self.ha.start()

    async def stop(self) -> None:
        await self.ha.stop()
        self._store.stop()

    async def submit_noop(self) -> scm_ratis_pb2.SCMRatisResponseProto:
        return await self.ha.submit_request(scm_ratis_pb2.SCMRatisRequestProto(
            type=scm_ratis_pb2.SEQUENCE_ID, method=scm_ratis_pb2.Method(name="allocateBatch")))


async def wait_for(pred: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)

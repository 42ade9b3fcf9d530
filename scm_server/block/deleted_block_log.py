"""DeletedBlockLog: OM's block deletions -> DeleteBlocks commands -> datanode ACKs -> purge.

Ozone's DeletedBlockLogImpl + DeletedBlockLogStateManager + SCMBlockDeletingService:

1. ``add_transactions`` (leader): each container's local IDs become a DeletedBlocksTransaction
   with a ``delTxnId`` from the SequenceIdGenerator, stored through the replicated
   ``addTransactionsToDB`` in the ``deletedBlocks`` table.
2. :class:`SCMBlockDeletingService` (leader-ready, out of safemode) sends each healthy datanode
   holding a replica a DeleteBlocksCommand with at most its share of
   ``hdds.scm.block.deletion.per-interval.max`` transactions, not re-sending a transaction to a DN
   while one is in flight.
3. Command status reports carry per-transaction ACKs; once every datanode holding a replica of
   the container has acknowledged a transaction, it is removed (replicated
   ``removeTransactionsFromDB``). Failures bump the retry count (replicated).

Who acknowledged what is soft leader state: after a leader change it starts empty and
transactions are simply sent again (datanodes treat repeats idempotently).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from scm_server.clock import Clock
from scm_server.conf import BlockConfig
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_service import BackgroundSCMService
from scm_server.ha.sequence_id_generator import DEL_TXN_ID, SequenceIdGenerator
from scm_server.ha.state_manager import ReplicatedStateManager
from scm_server.node.node_manager import SCMNodeManager
from scm_server.proto import hdds_pb2, scm_datanode_pb2

log = logging.getLogger(__name__)
CommandType = scm_datanode_pb2.SCMCommandProto.Type


class DeletedBlockLogStateManager(ReplicatedStateManager):
    """Replicated part: the deletedBlocks table."""

    _txs: dict[int, hdds_pb2.DeletedBlocksTransaction]

    def reinitialize(self) -> None:
        self._txs = dict(self._store.deleted_blocks.items())

    def get(self, txid: int) -> hdds_pb2.DeletedBlocksTransaction | None:
        return self._txs.get(txid)

    def transactions(self) -> list[hdds_pb2.DeletedBlocksTransaction]:
        return [self._txs[t] for t in sorted(self._txs)]

    def __len__(self) -> int:
        return len(self._txs)

    @replicate(RequestType.BLOCK)
    def add_transactions_to_db(self, transactions: list[hdds_pb2.DeletedBlocksTransaction]) -> None:
        for tx in transactions:
            existing = self._txs.get(tx.txID)
            if existing is not None and existing != tx:
                raise SCMException(ResultCodes.INVALID_REQUEST, f"deleted-block transaction {tx.txID} already exists")
        for tx in transactions:
            stored = hdds_pb2.DeletedBlocksTransaction()
            stored.CopyFrom(tx)
            self._txs[tx.txID] = stored
            self._buffer.add_to_buffer(self._store.deleted_blocks, tx.txID, stored)

    @replicate(RequestType.BLOCK)
    def remove_transactions_from_db(self, txids: list[int]) -> None:
        for txid in txids:
            if self._txs.pop(txid, None) is not None:
                self._buffer.remove_from_buffer(self._store.deleted_blocks, txid)

    @replicate(RequestType.BLOCK)
    def increase_retry_count_of_transaction_in_db(self, txids: list[int]) -> None:
        for txid in txids:
            tx = self._txs.get(txid)
            if tx is None:
                continue
            updated = hdds_pb2.DeletedBlocksTransaction()
            updated.CopyFrom(tx)
            updated.count = tx.count + 1
            self._txs[txid] = updated
            self._buffer.add_to_buffer(self._store.deleted_blocks, txid, updated)

    @replicate(RequestType.BLOCK)
    def reset_retry_count_of_transaction_in_db(self, txids: list[int]) -> None:
        for txid in txids:
            tx = self._txs.get(txid)
            if tx is None or tx.count == 0:
                continue
            updated = hdds_pb2.DeletedBlocksTransaction()
            updated.CopyFrom(tx)
            updated.count = 0
            self._txs[txid] = updated
            self._buffer.add_to_buffer(self._store.deleted_blocks, txid, updated)


@dataclass
class _InFlight:
    cmd_id: int
    txids: set[int]
    sent_at: float


# container id -> uuids of the datanodes holding a replica (ContainerManager; narrow for tests)
ReplicaLocatorFn = Callable[[int], set[str]]


class DeletedBlockLog:
    def __init__(
        self,
        state_manager: DeletedBlockLogStateManager,
        sequence_id_generator: SequenceIdGenerator,
        node_manager: SCMNodeManager,
        replica_datanodes: ReplicaLocatorFn,
        scm_context: SCMContext,
        clock: Clock,
        config: BlockConfig,
    ) -> None:
        self.state_manager = state_manager
        self.sequence_id_generator = sequence_id_generator
        self.node_manager = node_manager
        self.replica_datanodes = replica_datanodes
        self.scm_context = scm_context
        self.clock = clock
        self.config = config
        self._acked: dict[int, set[str]] = defaultdict(set)
        self._in_flight: dict[str, _InFlight] = {}
        self.commands_sent = 0
        self.transactions_committed = 0

    def on_become_leader(self) -> None:
        """Soft delivery state is per leader term: start clean (Ozone onBecomeLeader)."""
        self._acked.clear()
        self._in_flight.clear()

    def reinitialize(self) -> None:
        self.state_manager.reinitialize()
        self.on_become_leader()

    def num_of_transactions(self) -> int:
        return len(self.state_manager)

    async def add_transactions(self, blocks_by_container: dict[int, list[int]]) -> list[int]:
        """Leader: create one transaction per container; returns the new txIDs."""
        self.scm_context.check_leader()
        txs = []
        for container_id in sorted(blocks_by_container):
            local_ids = blocks_by_container[container_id]
            if not local_ids:
                continue
            txid = await self.sequence_id_generator.get_next_id(DEL_TXN_ID)
            txs.append(
                hdds_pb2.DeletedBlocksTransaction(txID=txid, containerID=container_id, localID=list(local_ids), count=0)
            )
        if txs:
            await self.state_manager.add_transactions_to_db(txs)
        return [t.txID for t in txs]

    def _in_flight_timeout_s(self) -> float:
        return max(self.config.deleting_service_interval.total_seconds() * 5, 1.0)

    def transactions_for(self, dn_uuid: str, limit: int) -> list[hdds_pb2.DeletedBlocksTransaction]:
        result: list[hdds_pb2.DeletedBlocksTransaction] = []
        for tx in self.state_manager.transactions():
            if len(result) >= limit:
                break
            if dn_uuid in self._acked.get(tx.txID, set()):
                continue
            if tx.count >= self.config.deletion_max_retry:
                continue
            if dn_uuid in self.replica_datanodes(tx.containerID):
                result.append(tx)
        return result

    def send_delete_commands(self) -> int:
        """Leader: one DeleteBlocksCommand per eligible datanode; returns commands queued."""
        if not self.scm_context.is_leader() or not len(self.state_manager):
            return 0
        now = self.clock.monotonic()
        # Decommissioning/maintenance nodes still hold replicas and must delete blocks too.
        nodes = self.node_manager.get_nodes(health=hdds_pb2.HEALTHY)
        if not nodes:
            return 0
        per_dn = max(1, self.config.deletion_per_interval_max // len(nodes))
        sent = 0
        for node in nodes:
            flight = self._in_flight.get(node.uuid)
            if flight is not None and now - flight.sent_at < self._in_flight_timeout_s():
                continue
            if node.command_queue_report.get(CommandType.deleteBlocksCommand, 0) > 0:
                continue  # the DN has not worked off the previous batch yet (Ozone throttling)
            txs = self.transactions_for(node.uuid, per_dn)
            if not txs:
                continue
            cmd_id = self.node_manager.next_command_id()
            self.node_manager.add_command(
                node.uuid,
                scm_datanode_pb2.SCMCommandProto(
                    commandType=CommandType.deleteBlocksCommand,
                    cmdId=cmd_id,
                    deleteBlocksCommandProto=scm_datanode_pb2.DeleteBlocksCommandProto(
                        deletedBlocksTransactions=txs, cmdId=cmd_id
                    ),
                ),
            )
            self._in_flight[node.uuid] = _InFlight(cmd_id, {t.txID for t in txs}, now)
            sent += 1
        self.commands_sent += sent
        return sent

    async def process_command_status(self, dn_uuid: str, status: scm_datanode_pb2.CommandStatus) -> None:
        """ACKs from a datanode's command status report (leader acts; followers ignore)."""
        if status.type != CommandType.deleteBlocksCommand or not self.scm_context.is_leader():
            return
        flight = self._in_flight.get(dn_uuid)
        if status.status == scm_datanode_pb2.CommandStatus.PENDING:
            return
        if flight is not None and flight.cmd_id == status.cmdId:
            del self._in_flight[dn_uuid]
        if status.status == scm_datanode_pb2.CommandStatus.FAILED and not status.HasField("blockDeletionAck"):
            if flight is not None:
                await self.state_manager.increase_retry_count_of_transaction_in_db(sorted(flight.txids))
            return
        failed: list[int] = []
        done: list[int] = []
        for result in status.blockDeletionAck.results:
            tx = self.state_manager.get(result.txID)
            if tx is None:
                continue
            if not result.success:
                failed.append(result.txID)
                continue
            self._acked[result.txID].add(dn_uuid)
            holders = self.replica_datanodes(tx.containerID)
            if holders <= self._acked[result.txID]:
                done.append(result.txID)
        if failed:
            await self.state_manager.increase_retry_count_of_transaction_in_db(failed)
        if done:
            await self.state_manager.remove_transactions_from_db(done)
            for txid in done:
                self._acked.pop(txid, None)
            self.transactions_committed += len(done)
            log.info("deleted-block transactions %s acknowledged by all replicas; removed", done)


class SCMBlockDeletingService(BackgroundSCMService):
    def __init__(self, log_: DeletedBlockLog, scm_context: SCMContext, clock: Clock, config: BlockConfig) -> None:
        self.deleted_block_log = log_
        super().__init__(
            "SCMBlockDeletingService",
            scm_context=scm_context,
            clock=clock,
            interval=config.deleting_service_interval,
            run_once=self.run_once,
        )

    async def run_once(self) -> None:
        self.deleted_block_log.send_delete_commands()

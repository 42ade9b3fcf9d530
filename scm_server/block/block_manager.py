"""BlockManager: allocate_block (Ozone's BlockManagerImpl.allocateBlock) and key-block deletion.

allocate_block, as Ozone's BlockManagerImpl does it:

1. only the leader allocates (NotLeader otherwise), checked BEFORE safemode: a follower that is
   still in safemode (just restarted, or catching up) must send the client to the leader, not fail
   it with SAFE_MODE_EXCEPTION; then reject in safemode (SAFE_MODE_EXCEPTION);
2. reject size <= 0 or > ozone.scm.container.size (INVALID_BLOCK_SIZE), and numBlocks <= 0 or
   above ``ozone.scm.block.max.blocks.per.request`` (INVALID_REQUEST): one call must not keep the
   leader busy for its whole deadline;
3. pick an OPEN pipeline of the replication config minus the exclude list (creating one and
   waiting for it if there is none; for EC, Ozone's WritableECContainerProvider: a new OPEN
   pipeline while fewer than ``ozone.scm.ec.pipeline.minimum`` exist, one container each), then a matching container on it (ContainerManager: reuse
   an open container of this owner with room, or allocate a new one while the pipeline has
   fewer than openContainerLimit);
4. localID from the ``localId`` sequence (an in-memory batch; a Raft round trip once per
   ``ozone.scm.sequence.id.batch.size`` blocks).

So an allocation only crosses Raft when it needs a new ID batch or a new container. A large call
yields to the event loop every ``YIELD_EVERY`` blocks, so small calls stay fast while it runs and
a cancelled or expired call (the gRPC edge cancels its task) stops at the next yield.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from scm_server.block.deleted_block_log import DeletedBlockLog
from scm_server.block_requests import num_blocks_problem
from scm_server.conf import SCMConfig
from scm_server.container.container_manager import ContainerManager
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.sequence_id_generator import LOCAL_ID, SequenceIdGenerator
from scm_server.pipeline.pipeline_manager import PipelineManager
from scm_server.proto import hdds_pb2, scm_client_pb2
from scm_server.protocols import BlockAllocation

log = logging.getLogger(__name__)
DeleteResult = scm_client_pb2.DeleteScmBlockResult
# Blocks allocated between two yields to the event loop: a fraction of a millisecond of work. A yield is a whole
# event-loop turn (an epoll call, then every ready task), so yielding much more often costs a visible share of
# the allocation time (docs/performance.md, "Figures behind choices in the code").
YIELD_EVERY = 32
# Full EC pipelines one allocation may close before it gives up (each closing lets a new one be made).
EC_PIPELINE_ATTEMPTS = 5


# Ozone's codecs (ECReplicationConfig.EcCodec), as its messages carry them: lower case
EC_CODECS = ("rs", "xor")


def checked_ec_config(ec: hdds_pb2.ECReplicationConfig | None) -> hdds_pb2.ECReplicationConfig:
    """The request's EC layout, codec in the lower case Ozone's messages carry (it reads either case);
    INVALID_REQUEST naming what is wrong."""
    if ec is None:
        raise SCMException(
            ResultCodes.INVALID_REQUEST,
            "replication type EC needs an ecReplicationConfig (data, parity, codec, ecChunkSize; e.g. rs-3-2-1024k)",
        )
    codec = ec.codec.lower()
    if codec not in EC_CODECS or ec.data <= 0 or ec.parity <= 0 or ec.ecChunkSize <= 0:
        raise SCMException(
            ResultCodes.INVALID_REQUEST,
            f"EC replication config data={ec.data} parity={ec.parity} codec={ec.codec!r} ecChunkSize={ec.ecChunkSize} "
            "is not valid: data, parity and ecChunkSize must be positive and codec RS or XOR (e.g. rs-3-2-1024k)",
        )
    return hdds_pb2.ECReplicationConfig(data=ec.data, parity=ec.parity, codec=codec, ecChunkSize=ec.ecChunkSize)


class BlockManager:
    def __init__(
        self,
        container_manager: ContainerManager,
        pipeline_manager: PipelineManager,
        sequence_id_generator: SequenceIdGenerator,
        deleted_block_log: DeletedBlockLog,
        scm_context: SCMContext,
        config: SCMConfig,
        pipeline_wait_s: float = 10.0,
    ) -> None:
        self.container_manager = container_manager
        self.pipeline_manager = pipeline_manager
        self.sequence_id_generator = sequence_id_generator
        self.deleted_block_log = deleted_block_log
        self.scm_context = scm_context
        self.config = config
        self.pipeline_wait_s = pipeline_wait_s
        self._rr = itertools.count()
        self.blocks_allocated = 0

    def _pick(self, pipelines: list[hdds_pb2.Pipeline]) -> hdds_pb2.Pipeline:
        # Round robin over OPEN pipelines (Ozone's RoundRobinPipelineChoosePolicy).
        return pipelines[next(self._rr) % len(pipelines)]

    async def allocate_block(
        self,
        size: int,
        num_blocks: int,
        rtype: int,
        rfactor: int,
        owner: str,
        exclude_list: hdds_pb2.ExcludeListProto | None = None,
        *,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> list[BlockAllocation]:
        """allocateBlock as (containerID, localID, pipeline) per block, for each edge to write its own answer
        from: no copy of the pipeline per block. The pipeline is the stored message itself, shared: read it, never
        change it (see :class:`scm_server.protocols.BlockAllocation`). ``ec``: an EC layout (``rtype`` EC), its
        blocks on EC pipelines made on demand (:meth:`_ec_container`)."""
        self.scm_context.check_leader()
        if self.scm_context.is_in_safe_mode():
            raise SCMException(ResultCodes.SAFE_MODE_EXCEPTION, "SCM is in safe mode; block allocation is not allowed")
        if size <= 0 or size > self.config.container_size:
            raise SCMException(
                ResultCodes.INVALID_BLOCK_SIZE,
                f"block size {size} must be > 0 and <= ozone.scm.container.size ({self.config.container_size})",
            )
        problem = num_blocks_problem(num_blocks, self.config.max_blocks_per_request)
        if problem is not None:
            raise SCMException(ResultCodes.INVALID_REQUEST, problem)
        ec = checked_ec_config(ec) if rtype == hdds_pb2.EC else None
        exclude = exclude_list or hdds_pb2.ExcludeListProto()
        excluded_containers = set(exclude.containerIds)
        limits: dict[str, int] = {}  # open container limit per pipeline, once per call
        blocks: list[BlockAllocation] = []
        for n in range(num_blocks):
            if n and n % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # bounded work per turn; cancellation lands here
                self.scm_context.check_leader()
            if ec is not None:
                container_id, pipeline = await self._ec_container(size, owner, ec, exclude, excluded_containers)
            else:
                pipeline = await self.pipeline_manager.get_or_create_open_pipeline(
                    rtype, rfactor, exclude, self._pick, self.pipeline_wait_s
                )
                open_limit = limits.get(pipeline.id.id)
                if open_limit is None:
                    open_limit = limits[pipeline.id.id] = self.container_manager.open_container_limit(pipeline)
                container_id = await self.container_manager.get_matching_container_id(
                    size, owner, pipeline, excluded_containers, open_limit
                )
            local_id = await self.sequence_id_generator.get_next_id(LOCAL_ID)
            blocks.append(BlockAllocation(container_id, local_id, pipeline))
        self.blocks_allocated += len(blocks)
        return blocks

    async def _ec_container(
        self,
        size: int,
        owner: str,
        ec: hdds_pb2.ECReplicationConfig,
        exclude: hdds_pb2.ExcludeListProto,
        excluded_containers: set[int],
    ) -> tuple[int, hdds_pb2.Pipeline]:
        """Ozone's WritableECContainerProvider: an EC pipeline (new while fewer than the limit are open)
        and its one open container; a pipeline whose container has no room for the block is closed with
        its container, and another one is taken."""
        for _ in range(EC_PIPELINE_ATTEMPTS):
            pipeline = await self.pipeline_manager.get_or_create_ec_pipeline(ec, exclude, self._pick)
            found, has_open = self.container_manager.open_with_room(size, owner, pipeline.id.id, excluded_containers)
            if found is not None:
                return found, pipeline
            if not has_open:
                container_id = await self.container_manager.get_matching_container_id(
                    size, owner, pipeline, excluded_containers, 1
                )
                return container_id, pipeline
            log.info("EC pipeline %s: its container has no room for %d bytes; closing the pipeline", pipeline.id.id, size)
            await self.pipeline_manager.close_pipeline(pipeline.id.id)
        raise SCMException(
            ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
            f"no EC pipeline with room for a {size}-byte block after closing {EC_PIPELINE_ATTEMPTS} full ones",
        )

    async def delete_key_blocks(
        self, key_blocks: list[scm_client_pb2.KeyBlocks]
    ) -> list[scm_client_pb2.DeleteKeyBlocksResultProto]:
        """OM's deleteKeyBlocks: record deletions in the DeletedBlockLog; per-block results."""
        in_safe_mode = self.scm_context.is_in_safe_mode()
        if not in_safe_mode:
            self.scm_context.check_leader()
        by_container: dict[int, list[int]] = {}
        results = []
        for kb in key_blocks:
            block_results = []
            for b in kb.blocks:
                if in_safe_mode:
                    code = DeleteResult.safeMode
                elif not self.container_manager.exists(b.containerID):
                    code = DeleteResult.errorNotFound
                else:
                    code = DeleteResult.success
                    by_container.setdefault(b.containerID, []).append(b.localID)
                block_results.append(DeleteResult(result=code, blockID=b))
            results.append(scm_client_pb2.DeleteKeyBlocksResultProto(objectKey=kb.key, blockResults=block_results))
        if by_container:
            await self.deleted_block_log.add_transactions(by_container)
        return results

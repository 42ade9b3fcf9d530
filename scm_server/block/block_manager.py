"""BlockManager: allocate_block (Ozone's BlockManagerImpl.allocateBlock) and key-block deletion.

allocate_block, per Ozone (ozone-scm.md §4):

1. reject in safemode (SAFE_MODE_EXCEPTION); only the leader allocates (NotLeader otherwise);
2. reject size <= 0 or > ozone.scm.container.size (INVALID_BLOCK_SIZE);
3. pick an OPEN pipeline of the replication config minus the exclude list (creating one and
   waiting for it if there is none), then a matching container on it (ContainerManager: reuse
   an open container of this owner with room, or allocate a new one while the pipeline has
   fewer than openContainerLimit);
4. localID from the ``localId`` sequence (an in-memory batch; a Raft round trip once per
   ``ozone.scm.sequence.id.batch.size`` blocks).

So an allocation only crosses Raft when it needs a new ID batch or a new container.
"""

from __future__ import annotations

import itertools
import logging

from scm_server.block.deleted_block_log import DeletedBlockLog
from scm_server.conf import SCMConfig
from scm_server.container.container_manager import ContainerManager
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.sequence_id_generator import LOCAL_ID, SequenceIdGenerator
from scm_server.pipeline.pipeline_manager import PipelineManager
from scm_server.proto import hdds_pb2, scm_client_pb2

log = logging.getLogger(__name__)
DeleteResult = scm_client_pb2.DeleteScmBlockResult


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
    ) -> list[hdds_pb2.AllocatedBlock]:
        if self.scm_context.is_in_safe_mode():
            raise SCMException(ResultCodes.SAFE_MODE_EXCEPTION, "SCM is in safe mode; block allocation is not allowed")
        if size <= 0 or size > self.config.container_size:
            raise SCMException(
                ResultCodes.INVALID_BLOCK_SIZE,
                f"block size {size} must be > 0 and <= ozone.scm.container.size ({self.config.container_size})",
            )
        if num_blocks <= 0:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"numBlocks must be positive, got {num_blocks}")
        self.scm_context.check_leader()
        exclude = exclude_list or hdds_pb2.ExcludeListProto()
        blocks: list[hdds_pb2.AllocatedBlock] = []
        for _ in range(num_blocks):
            pipeline = await self.pipeline_manager.get_or_create_open_pipeline(
                rtype, rfactor, exclude, self._pick, self.pipeline_wait_s
            )
            container = await self.container_manager.get_matching_container(
                size, owner, pipeline, exclude_ids=exclude.containerIds
            )
            local_id = await self.sequence_id_generator.get_next_id(LOCAL_ID)
            blocks.append(
                hdds_pb2.AllocatedBlock(
                    containerBlockID=hdds_pb2.ContainerBlockID(containerID=container.containerID, localID=local_id),
                    pipeline=pipeline,
                )
            )
        self.blocks_allocated += len(blocks)
        return blocks

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

"""A tiny stand-in for the StorageContainerManager facade, for unit tests of the edge layer only."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_datanode_pb2


class FakeSCM:
    def __init__(self, *, leader: bool = True, leader_id: str = "scm2", cluster_id: str = "CID-x") -> None:
        self.leader = leader
        self.leader_id = leader_id
        self.cluster_id = cluster_id
        self.metrics_registry = CollectorRegistry()
        self.safe_mode = True
        self.calls: list[str] = []
        self.next_local_id = 1

    def _check_leader(self) -> None:
        if not self.leader:
            raise NotLeaderException("follower", self.leader_id, "ratis-address-not-for-clients:1")

    def require_leader(self) -> None:
        self._check_leader()

    def answer_label(self) -> tuple[str, str, str]:
        return ("scm-x", "LEADER" if self.leader else "FOLLOWER", "" if self.leader else self.leader_id)

    def get_version(self) -> scm_datanode_pb2.SCMVersionResponseProto:
        return scm_datanode_pb2.SCMVersionResponseProto(
            softwareVersion=1, keys=[hdds_pb2.KeyValue(key="clusterID", value=self.cluster_id)]
        )

    async def register_datanode(self, req: Any) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        ok = req.clusterID == self.cluster_id
        return scm_datanode_pb2.SCMRegisteredResponseProto(
            errorCode=1 if ok else 2, datanodeUUID=req.datanodeDetails.uuid, clusterID=self.cluster_id,
            errorMessage="" if ok else "wrong cluster",
        )

    async def process_heartbeat(self, req: Any) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        return scm_datanode_pb2.SCMHeartbeatResponseProto(datanodeUUID=req.datanodeDetails.uuid)

    async def allocate_block_response(self, size: int, num: int, rtype: int, rfactor: int, owner: str,
                                      exclude: Any = None, *, ec: Any = None) -> scm_client_pb2.AllocateScmBlockResponseProto:
        blocks = await self.allocate_block(size, num, rtype, rfactor, owner, exclude)
        return scm_client_pb2.AllocateScmBlockResponseProto(blocks=blocks)

    async def allocate_blocks(self, size: int, num: int, rtype: int, rfactor: int, owner: str,
                              exclude: Any = None, *, ec: Any = None) -> list[tuple[int, int, hdds_pb2.Pipeline]]:
        blocks = await self.allocate_block(size, num, rtype, rfactor, owner, exclude)
        return [(b.containerBlockID.containerID, b.containerBlockID.localID, b.pipeline) for b in blocks]

    async def allocate_block(self, size: int, num: int, rtype: int, rfactor: int, owner: str,
                             exclude: Any = None) -> list[hdds_pb2.AllocatedBlock]:
        self.calls.append("allocate_block")
        self._check_leader()
        if size <= 0 or size > 1 << 30:
            raise SCMException(ResultCodes.INVALID_BLOCK_SIZE, f"block size {size} out of range")
        out = []
        for _ in range(num):
            out.append(hdds_pb2.AllocatedBlock(
                containerBlockID=hdds_pb2.ContainerBlockID(containerID=1, localID=self.next_local_id),
                pipeline=hdds_pb2.Pipeline(id=hdds_pb2.PipelineID(id="p1")),
            ))
            self.next_local_id += 1
        return out

    def get_scm_info(self) -> scm_client_pb2.GetScmInfoResponseProto:
        return scm_client_pb2.GetScmInfoResponseProto(clusterId=self.cluster_id, scmId="scm-x")

    def get_container(self, cid: int) -> hdds_pb2.ContainerInfoProto:
        self._check_leader()
        if cid != 1:
            raise SCMException(ResultCodes.CONTAINER_NOT_FOUND, f"container #{cid} not found")
        return hdds_pb2.ContainerInfoProto(containerID=1, state=hdds_pb2.OPEN)

    def in_safe_mode(self) -> tuple[bool, bool]:
        return self.safe_mode, True

    def force_exit_safe_mode(self) -> bool:
        self.safe_mode = False
        return True

    def status_summary(self) -> dict[str, Any]:
        return {
            "cluster_id": self.cluster_id,
            "nodes": [{"hostname": "dn1", "uuid": "u1", "health": "HEALTHY", "op_state": "IN_SERVICE"}],
            "pipelines": [{"id": "p1", "state": "PIPELINE_OPEN", "members": ["u1"], "leader": "u1"}],
            "containers_by_state": {"OPEN": 1},
            "ha": {"is_leader": self.leader, "term": 3},
        }

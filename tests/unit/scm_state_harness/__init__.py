"""Shared helpers for SCM-state unit tests: an in-process SCM (stub HA, FakeClock) and fake datanodes.

The fake datanodes speak the real protobuf messages to the facade (no gRPC): register, heartbeat
with reports, and the test inspects/executes the commands returned.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from scm_server.clock import FakeClock
from scm_server.conf import OzoneConfiguration
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.scm import StorageContainerManager

CLUSTER_ID = "CID-11111111-2222-3333-4444-555555555555"


def make_conf(meta_dir: Path, **overrides: str) -> OzoneConfiguration:
    values = {
        "ozone.metadata.dirs": str(meta_dir),
        "hdds.scm.safemode.min.datanode": "3",
        "ozone.scm.sequence.id.batch.size": "100",
        "ozone.scm.container.size": "1GB",
        "ozone.scm.block.size": "64MB",
        "hdds.scm.wait.time.after.safemode.exit": "0s",
    }
    values.update(overrides)
    return OzoneConfiguration(values)


def init_storage(meta_dir: Path, scm_id: str | None = None) -> SCMStorageConfig:
    storage = SCMStorageConfig(meta_dir)
    storage.initialize(cluster_id=CLUSTER_ID, scm_id=scm_id or str(uuid.uuid4()))
    return storage


async def make_scm(
    meta_dir: Path, clock: FakeClock | None = None, scm_id: str | None = None, **overrides: str
) -> StorageContainerManager:
    init_storage(meta_dir, scm_id)
    # No fsync per batch: these tests check logic, not crash durability (much faster on a busy disk).
    store = SCMMetadataStore(meta_dir, sync=False)
    scm = await StorageContainerManager.create(
        make_conf(meta_dir, **overrides), clock=clock or FakeClock(), metadata_store=store
    )
    await scm.ha_manager.start()  # stub: becomes leader; no background tasks in unit tests
    return scm


@dataclass
class FakeDatanode:
    """A datanode that reports what the test tells it to."""

    uuid: str
    host: str
    rack: str = "/rack1"
    replicas: dict[int, hdds_pb2.ContainerReplicaProto] = field(default_factory=dict)
    pipelines: set[str] = field(default_factory=set)
    op_state: int = hdds_pb2.IN_SERVICE
    received: list[scm_datanode_pb2.SCMCommandProto] = field(default_factory=list)

    @property
    def details(self) -> hdds_pb2.DatanodeDetailsProto:
        return hdds_pb2.DatanodeDetailsProto(
            uuid=self.uuid,
            hostName=self.host,
            ipAddress="127.0.0.1",
            networkLocation=self.rack,
            persistedOpState=self.op_state,  # type: ignore[arg-type]
        )

    def container_report(self) -> scm_datanode_pb2.ContainerReportsProto:
        return scm_datanode_pb2.ContainerReportsProto(reports=list(self.replicas.values()))

    def pipeline_report(self) -> scm_datanode_pb2.PipelineReportsProto:
        return scm_datanode_pb2.PipelineReportsProto(
            pipelineReport=[
                scm_datanode_pb2.PipelineReport(pipelineID=hdds_pb2.PipelineID(id=p), isLeader=False)
                for p in sorted(self.pipelines)
            ]
        )

    def node_report(self) -> scm_datanode_pb2.NodeReportProto:
        return scm_datanode_pb2.NodeReportProto(
            storageReport=[
                scm_datanode_pb2.StorageReportProto(
                    storageUuid=f"{self.uuid}-vol", storageLocation="/data", capacity=100 << 30, remaining=90 << 30
                )
            ]
        )

    async def register(self, scm: StorageContainerManager, cluster_id: str = CLUSTER_ID) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        return await scm.register_datanode(
            scm_datanode_pb2.SCMRegisterRequestProto(
                datanodeDetails=self.details,
                nodeReport=self.node_report(),
                containerReport=self.container_report(),
                pipelineReports=self.pipeline_report(),
                clusterID=cluster_id,
            )
        )

    async def heartbeat(
        self, scm: StorageContainerManager, *, full: bool = True, **extra: object
    ) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        req = scm_datanode_pb2.SCMHeartbeatRequestProto(datanodeDetails=self.details, nodeReport=self.node_report())
        if full:
            req.containerReport.CopyFrom(self.container_report())
            req.pipelineReports.CopyFrom(self.pipeline_report())
        for key, value in extra.items():
            field_value = getattr(req, key)
            if isinstance(value, list):
                field_value.extend(value)
            else:
                field_value.CopyFrom(value)
        resp = await scm.process_heartbeat(req)
        self.received.extend(resp.commands)
        return resp

    def execute(self, commands: list[scm_datanode_pb2.SCMCommandProto]) -> None:
        """Apply pipeline commands and op-state changes locally (enough for the unit tests)."""
        T = scm_datanode_pb2.SCMCommandProto.Type
        for c in commands:
            if c.commandType == T.createPipelineCommand:
                self.pipelines.add(c.createPipelineCommandProto.pipelineID.id)
            elif c.commandType == T.closePipelineCommand:
                self.pipelines.discard(c.closePipelineCommandProto.pipelineID.id)
            elif c.commandType == T.setNodeOperationalStateCommand:
                self.op_state = c.setNodeOperationalStateCommandProto.nodeOperationalState


def make_datanodes(n: int, racks: int = 1) -> list[FakeDatanode]:
    return [
        FakeDatanode(uuid=f"00000000-0000-0000-0000-{i:012d}", host=f"dn{i}", rack=f"/rack{i % racks + 1}")
        for i in range(1, n + 1)
    ]


async def bring_up(scm: StorageContainerManager, dns: list[FakeDatanode], rounds: int = 2) -> None:
    """Register, create pipelines through the creator, let DNs report them until they open."""
    for dn in dns:
        await dn.register(scm)
    await scm.pipeline_manager.create_pipelines_up_to_limit()
    for _ in range(rounds):
        for dn in dns:
            resp = await dn.heartbeat(scm)
            dn.execute(list(resp.commands))


def replica(
    cid: int,
    state: int = hdds_pb2.ContainerReplicaProto.CLOSED,
    keys: int = 10,
    bcsid: int = 5,
    origin: str = "",
    empty: bool = False,
    used: int = 1000,
) -> hdds_pb2.ContainerReplicaProto:
    return hdds_pb2.ContainerReplicaProto(
        containerID=cid,
        state=state,  # type: ignore[arg-type]
        keyCount=keys,
        used=used,
        blockCommitSequenceId=bcsid,
        originNodeId=origin,
        isEmpty=empty,
    )

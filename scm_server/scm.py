"""StorageContainerManager: the SCM facade (skeleton; managers land in following commits).

Signatures are the contract in /work/notes/scm_api.md; scm-edges codes against them.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from scm_server.conf import OzoneConfiguration, SCMConfigurations
from scm_server.ha.clock import Clock
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_datanode_pb2


class StorageContainerManager:
    scm_context: SCMContext
    ha_manager: SCMHAManager
    metadata_store: SCMMetadataStore
    storage_config: SCMStorageConfig
    config: SCMConfigurations
    metrics_registry: CollectorRegistry

    @classmethod
    async def create(
        cls,
        conf: OzoneConfiguration,
        *,
        ha_manager: SCMHAManager | None = None,
        clock: Clock | None = None,
        node_id: str | None = None,
        metadata_store: SCMMetadataStore | None = None,
        storage_config: SCMStorageConfig | None = None,
    ) -> StorageContainerManager:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def reinitialize(self) -> None:
        raise NotImplementedError

    # ---- datanode protocol ----
    def get_version(self) -> scm_datanode_pb2.SCMVersionResponseProto:
        raise NotImplementedError

    async def register_datanode(
        self, request: scm_datanode_pb2.SCMRegisterRequestProto
    ) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        raise NotImplementedError

    async def process_heartbeat(
        self, request: scm_datanode_pb2.SCMHeartbeatRequestProto
    ) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        raise NotImplementedError

    # ---- block protocol ----
    async def allocate_block(
        self,
        size: int,
        num_blocks: int,
        replication_type: int,
        replication_factor: int,
        owner: str,
        exclude_list: hdds_pb2.ExcludeListProto | None = None,
    ) -> list[hdds_pb2.AllocatedBlock]:
        raise NotImplementedError

    async def delete_key_blocks(
        self, key_blocks: list[scm_client_pb2.KeyBlocks]
    ) -> list[scm_client_pb2.DeleteKeyBlocksResultProto]:
        raise NotImplementedError

    def get_scm_info(self) -> scm_client_pb2.GetScmInfoResponseProto:
        raise NotImplementedError

    # ---- admin ----
    async def allocate_container(self, rtype: int, rfactor: int, owner: str) -> hdds_pb2.ContainerWithPipeline:
        raise NotImplementedError

    def get_container(self, container_id: int) -> hdds_pb2.ContainerInfoProto:
        raise NotImplementedError

    def get_container_with_pipeline(
        self, container_id: int
    ) -> tuple[hdds_pb2.ContainerWithPipeline, list[hdds_pb2.ContainerReplicaInfo]]:
        raise NotImplementedError

    def list_containers(
        self,
        start_id: int = 0,
        count: int = 1000,
        state: int | None = None,
        rtype: int | None = None,
        rfactor: int | None = None,
    ) -> tuple[list[hdds_pb2.ContainerInfoProto], int]:
        raise NotImplementedError

    async def close_container(self, container_id: int) -> None:
        raise NotImplementedError

    def list_pipelines(self) -> list[hdds_pb2.Pipeline]:
        raise NotImplementedError

    async def create_pipeline(self, rtype: int, rfactor: int) -> hdds_pb2.Pipeline:
        raise NotImplementedError

    async def close_pipeline(self, pipeline_id: str) -> None:
        raise NotImplementedError

    async def activate_pipeline(self, pipeline_id: str) -> None:
        raise NotImplementedError

    async def deactivate_pipeline(self, pipeline_id: str) -> None:
        raise NotImplementedError

    def in_safe_mode(self) -> tuple[bool, bool]:
        raise NotImplementedError

    def force_exit_safe_mode(self) -> bool:
        raise NotImplementedError

    def safe_mode_rule_statuses(self) -> list[hdds_pb2.SafeModeRuleStatus]:
        raise NotImplementedError

    def start_replication_manager(self) -> None:
        raise NotImplementedError

    def stop_replication_manager(self) -> None:
        raise NotImplementedError

    def replication_manager_status(self) -> bool:
        raise NotImplementedError

    def replication_manager_report(self) -> hdds_pb2.ReplicationManagerReportProto:
        raise NotImplementedError

    def query_nodes(self, state: int | None = None, op_state: int | None = None) -> list[hdds_pb2.Node]:
        raise NotImplementedError

    async def decommission_nodes(self, hosts: list[str], force: bool = False) -> list[scm_client_pb2.DatanodeAdminError]:
        raise NotImplementedError

    async def start_maintenance_nodes(
        self, hosts: list[str], end_hours: int = 0
    ) -> list[scm_client_pb2.DatanodeAdminError]:
        raise NotImplementedError

    async def recommission_nodes(self, hosts: list[str]) -> list[scm_client_pb2.DatanodeAdminError]:
        raise NotImplementedError

    def status_summary(self) -> dict[str, Any]:
        raise NotImplementedError

"""Ozone's datanode report handlers, as thin named entry points (SCMEvents.CONTAINER_REPORT etc.).

The work lives in :class:`~scm_server.container.container_manager.ContainerManager`; these
classes keep Ozone's vocabulary at the place where the heartbeat fans reports out, so a reader
coming from Ozone finds ``ContainerReportHandler`` and ``IncrementalContainerReportHandler``.
They run on every SCM (replicas are soft state); lifecycle transitions inside are leader-only.
"""

from __future__ import annotations

from scm_server.container.container_manager import ContainerManager
from scm_server.proto import scm_datanode_pb2
from scm_server.protocols import ContainerReport


class ContainerReportHandler:
    """Full container report: the datanode's replica set is exactly what it lists."""

    def __init__(self, container_manager: ContainerManager) -> None:
        self.container_manager = container_manager

    async def on_message(self, dn_uuid: str, report: ContainerReport) -> None:
        await self.container_manager.process_container_report(dn_uuid, report)


class IncrementalContainerReportHandler:
    """ICR: replicas that changed (closed, deleted, ...) since the last report."""

    def __init__(self, container_manager: ContainerManager) -> None:
        self.container_manager = container_manager

    async def on_message(self, dn_uuid: str, report: scm_datanode_pb2.IncrementalContainerReportProto) -> None:
        await self.container_manager.process_incremental_report(dn_uuid, report)


class ContainerActionsHandler:
    """ContainerAction CLOSE (CONTAINER_FULL / CONTAINER_UNHEALTHY) from a datanode."""

    def __init__(self, container_manager: ContainerManager) -> None:
        self.container_manager = container_manager

    async def on_message(self, dn_uuid: str, actions: scm_datanode_pb2.ContainerActionsProto) -> None:
        for action in actions.containerActions:
            await self.container_manager.process_container_action(dn_uuid, action)

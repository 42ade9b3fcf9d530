"""Containers: replicated ContainerStateManager, ContainerManager (allocation, close, report
handlers, soft replica state) and the ReplicationManager (``container.replication``)."""

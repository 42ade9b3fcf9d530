"""Datanodes: SCMNodeManager (soft state: registration, health, op state, command queues) and the
decommission/maintenance monitor."""

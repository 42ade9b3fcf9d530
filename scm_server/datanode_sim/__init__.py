"""Simulated datanodes over the real gRPC datanode protocol (library + ``ozone-scm datanode-sim``)."""

from scm_server.datanode_sim.fencing import CommandFence
from scm_server.datanode_sim.simulator import DatanodeSimulator, EndpointState, Replica, SimDatanode

__all__ = ["CommandFence", "DatanodeSimulator", "EndpointState", "Replica", "SimDatanode"]

"""Typed clients for SCM: ``SCMClient`` (async, failover), ``SyncSCMClient`` (CLI), datanode protocol."""

from scm_server.client.config import SCMClientConfig
from scm_server.client.datanode_client import DatanodeProtocolClient
from scm_server.client.errors import SCMUnavailableError
from scm_server.client.scm_client import SafeModeStatus, SCMClient, parse_addresses
from scm_server.client.sync import SyncSCMClient

__all__ = [
    "DatanodeProtocolClient",
    "SCMClient",
    "SCMClientConfig",
    "SCMUnavailableError",
    "SafeModeStatus",
    "SyncSCMClient",
    "parse_addresses",
]

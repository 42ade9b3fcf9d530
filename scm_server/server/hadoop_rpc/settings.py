"""The Hadoop RPC server's settings, read with Hadoop's own keys (an Ozone admin knows them)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from scm_server.conf import OzoneConfiguration
from scm_server.exceptions import ConfigError
from scm_server.server.endpoints import Protocol

MAX_DATA_LENGTH_KEY = "ipc.maximum.data.length"
MAX_IDLE_KEY = "ipc.client.connection.maxidletime"
DEFAULT_MAX_DATA_LENGTH = 64 << 20
DEFAULT_MAX_IDLE = timedelta(milliseconds=10000)


@dataclasses.dataclass(frozen=True)
class HadoopRpcSettings:
    max_frame: int  # bytes; a longer frame is refused (FATAL) before it is read
    idle_timeout: float  # seconds; as Hadoop's server: twice the client's max idle time

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> HadoopRpcSettings:
        size = conf.get_size(MAX_DATA_LENGTH_KEY, DEFAULT_MAX_DATA_LENGTH)
        if size is None or size < 1024:
            raise ConfigError(f"{MAX_DATA_LENGTH_KEY}={size} is too small: give at least 1024 bytes (default 64MB)")
        idle = conf.get_duration(MAX_IDLE_KEY, DEFAULT_MAX_IDLE)
        if idle is None or idle.total_seconds() <= 0:
            raise ConfigError(f"{MAX_IDLE_KEY}={idle} must be a positive duration (default 10000 ms)")
        return cls(max_frame=int(size), idle_timeout=2 * idle.total_seconds())


def hadoop_rpc_listeners(*, secure: bool, kerberos: bool = False) -> tuple[list[Protocol], str | None]:
    """Which of Ozone's protocols this SCM serves over Hadoop RPC, on Ozone's own port keys, and the one log line
    saying what is left out and why (None when nothing is). All four when security is off, and all four with
    ``ozone.security.enabled`` and ``hadoop.security.authentication=kerberos`` (every caller authenticated, as
    Ozone's secure SCM serves them). With ``ozone.security.enabled`` and SIMPLE authentication nobody is
    authenticated, so only the security protocol is served (it hands out public certificates and never issues
    one over Hadoop RPC); the others are served over gRPC with mutual TLS only."""
    every = [Protocol.BLOCK_HADOOP, Protocol.DATANODE_HADOOP, Protocol.CLIENT_HADOOP, Protocol.SECURITY_HADOOP]
    if not secure or kerberos:
        return every, None
    left_out = [p for p in every if p is not Protocol.SECURITY_HADOOP]
    return [Protocol.SECURITY_HADOOP], (
        "ozone.security.enabled is true and hadoop.security.authentication is simple (set it to kerberos, with "
        "hdds.scm.kerberos.principal and hdds.scm.kerberos.keytab.file, to serve every listener): "
        f"{', '.join(p.port_key for p in left_out)} not served; their protocols are served over gRPC with "
        f"mutual TLS on {', '.join(_grpc_twin(p).port_key for p in left_out)}"
    )


def _grpc_twin(protocol: Protocol) -> Protocol:
    return {
        Protocol.BLOCK_HADOOP: Protocol.BLOCK,
        Protocol.DATANODE_HADOOP: Protocol.DATANODE,
        Protocol.CLIENT_HADOOP: Protocol.CLIENT,
        Protocol.SECURITY_HADOOP: Protocol.SECURITY,
    }[protocol]

"""The Hadoop RPC server's settings, read with Hadoop's own keys (an Ozone admin knows them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
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


def hadoop_rpc_refusal(wanted: Sequence[Protocol], *, secure: bool) -> str | None:
    """Why this SCM must not start with the Hadoop RPC listeners ``wanted``, or None. With SIMPLE authentication
    nobody is authenticated, so with ``ozone.security.enabled`` only the security protocol's listener may be
    served (it hands out public certificates and never issues one over Hadoop RPC)."""
    unauthenticated = [p for p in wanted if p is not Protocol.SECURITY_HADOOP]
    if not secure or not unauthenticated:
        return None
    return (
        f"{unauthenticated[0].port_key} is set but ozone.security.enabled is true: Hadoop RPC serves SIMPLE "
        "authentication only so far (Kerberos is the next step of issue 20); unset one of them "
        "(ozone.scm.security.service.hadoop-rpc.port may stay: it serves certificate reads only)"
    )

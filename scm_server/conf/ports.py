"""The SCM's service ports: which key names which port, for which transport, with which default.

Ozone's own keys and port numbers serve **Hadoop RPC**, the transport Apache Ozone's OM, datanodes and
``ozone admin`` speak, so an Ozone component configured with Ozone's keys alone finds this SCM:

- client (location/admin): ``ozone.scm.client.port`` 9860; gRPC ``ozone.scm.client.grpc.port`` 19860
- datanode: ``ozone.scm.datanode.port`` 9861; gRPC ``ozone.scm.datanode.grpc.port`` 19861
- block (OM's): ``ozone.scm.block.client.port`` 9863; gRPC ``ozone.scm.block.client.grpc.port`` 19863
- security (certificates): ``ozone.scm.security.service.port`` 9961; gRPC ``ozone.scm.security.service.grpc.port``
  19961

Each port key has an address key beside it (``ozone.scm.client.address``, ``ozone.scm.client.grpc.address``:
``host`` or ``host:port``) and a bind-host key (``ozone.scm.client.bind.host``,
``ozone.scm.client.grpc.bind.host``); all take Ozone's per-node suffix ``.<serviceId>.<nodeId>``. The Raft
port (``ozone.scm.ratis.port``, 9894) and the inter-SCM port (``ozone.scm.grpc.port``, 9895) are unchanged.

Earlier releases served gRPC on Ozone's keys and Hadoop RPC on opt-in keys
(``ozone.scm.<x>.hadoop-rpc.port``/``.address``). Those keys are refused with one line naming the renames
(:func:`retired_key_problem`), so an old configuration never silently binds a transport where its clients
expect the other one.

Pure data and pure functions of a ``get(key) -> str | None`` lookup; read by the endpoint lookups
(``scm_server.server.endpoints``), the typed HA groups and the security bootstrap.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable

Getter = Callable[[str], "str | None"]


class Transport(enum.Enum):
    HADOOP_RPC = "hadoop-rpc"
    GRPC = "grpc"


@dataclasses.dataclass(frozen=True)
class ServicePort:
    """One protocol on one transport: its port key, default port and address key."""

    protocol: str  # client, datanode, block, security
    transport: Transport
    port_key: str
    default_port: int
    address_key: str

    @property
    def bind_host_key(self) -> str:
        return self.address_key.removesuffix(".address") + ".bind.host"


def _pair(protocol: str, stem: str, ozone_port: int) -> tuple[ServicePort, ServicePort]:
    hadoop = ServicePort(protocol, Transport.HADOOP_RPC, f"{stem}.port", ozone_port, f"{stem}.address")
    grpc = ServicePort(protocol, Transport.GRPC, f"{stem}.grpc.port", 10000 + ozone_port, f"{stem}.grpc.address")
    return hadoop, grpc


CLIENT_HADOOP, CLIENT_GRPC = _pair("client", "ozone.scm.client", 9860)
DATANODE_HADOOP, DATANODE_GRPC = _pair("datanode", "ozone.scm.datanode", 9861)
BLOCK_HADOOP, BLOCK_GRPC = _pair("block", "ozone.scm.block.client", 9863)
SECURITY_HADOOP, SECURITY_GRPC = _pair("security", "ozone.scm.security.service", 9961)

ALL: tuple[ServicePort, ...] = (
    CLIENT_HADOOP, DATANODE_HADOOP, BLOCK_HADOOP, SECURITY_HADOOP,
    CLIENT_GRPC, DATANODE_GRPC, BLOCK_GRPC, SECURITY_GRPC,
)
GRPC_BY_PROTOCOL = {p.protocol: p for p in ALL if p.transport is Transport.GRPC}
HADOOP_BY_PROTOCOL = {p.protocol: p for p in ALL if p.transport is Transport.HADOOP_RPC}

# The defaults, as OzoneConfiguration's DEFAULTS table wants them (key -> text)
DEFAULT_PORTS: dict[str, str] = {p.port_key: str(p.default_port) for p in ALL}

_RETIRED_SUFFIXES = ("port", "address")


def _retired_keys(stem: str, suffixes: Iterable[str]) -> list[tuple[str, str, str]]:
    """(retired key, the Ozone key now serving Hadoop RPC, the gRPC key) for each retired form of ``stem``."""
    return [(f"{stem}.hadoop-rpc.{s}", f"{stem}.{s}", f"{stem}.grpc.{s}") for s in suffixes]


RETIRED: tuple[tuple[str, str, str], ...] = tuple(
    entry
    for hadoop in (CLIENT_HADOOP, DATANODE_HADOOP, BLOCK_HADOOP, SECURITY_HADOOP)
    for entry in _retired_keys(hadoop.port_key.removesuffix(".port"), _RETIRED_SUFFIXES)
)


def retired_key_problem(get: Getter, suffixes: Iterable[str] = ("",)) -> str | None:
    """One line naming the first retired ``*.hadoop-rpc.*`` key set (plain or with one of ``suffixes``, such as
    ``.<serviceId>.<nodeId>``) and the two renames that keep the configuration's meaning, or None."""
    for old, ozone_key, grpc_key in RETIRED:
        for suffix in suffixes:
            if get(old + suffix) is not None:
                return (
                    f"{old + suffix} is no longer read: Ozone's own {ozone_key} now serves Hadoop RPC and gRPC "
                    f"moved to {grpc_key}; rename {old + suffix} to {ozone_key + suffix}, and a "
                    f"{ozone_key + suffix} meant for gRPC to {grpc_key + suffix} (docs/operations.md, 'Ports')"
                )
    return None

"""Where each SCM listens, derived from Ozone's config keys.

One SCM exposes three gRPC protocols (datanode, block client, admin client), with security on
a fourth (the security protocol, certificates), and an HTTP server. With several SCMs on one host (HA on loopback) the ports differ per node, using
Ozone's suffix form ``<key>.<serviceId>.<nodeId>``. The same lookups serve three callers:
the daemon (what to bind), the servicers (the leader's address for the protocol that was
called, put into a NotLeader error) and the CLI (default ``--scm`` addresses).

Pure functions over a ``get(key) -> str | None`` lookup, so they are trivial to test. A malformed
port or host raises ConfigError naming the key that held it (the per-node suffixed key when
that is where the value came from).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable

from scm_server.conf import ports
from scm_server.conf.addresses import check_host, parse_port, split_host_port
from scm_server.exceptions import ConfigError

Getter = Callable[[str], "str | None"]


class Protocol(enum.Enum):
    """The SCM network endpoints: gRPC on our own keys, Ozone's protocols over Hadoop RPC on Ozone's keys
    (the table, the defaults and the retired keys: :mod:`scm_server.conf.ports`)."""

    # gRPC (our client, CLI, simulator, operator): ozone.scm.<x>.grpc.port, 19860/19861/19863/19961
    CLIENT = ports.CLIENT_GRPC
    DATANODE = ports.DATANODE_GRPC
    BLOCK = ports.BLOCK_GRPC
    # SCMSecurityProtocol (certificates; TLS without client certificates), only with ozone.security.enabled
    SECURITY = ports.SECURITY_GRPC
    # Ozone's protocols over Hadoop RPC on Ozone's own keys and ports: ScmBlockLocationProtocol (9863),
    # StorageContainerDatanodeProtocol (9861), StorageContainerLocationProtocol (9860), SCMSecurityProtocol (9961)
    BLOCK_HADOOP = ports.BLOCK_HADOOP
    DATANODE_HADOOP = ports.DATANODE_HADOOP
    CLIENT_HADOOP = ports.CLIENT_HADOOP
    SECURITY_HADOOP = ports.SECURITY_HADOOP

    @property
    def port_key(self) -> str:
        return self.value.port_key

    @property
    def default_port(self) -> int:
        return self.value.default_port

    @property
    def address_key(self) -> str:
        return self.value.address_key

    @property
    def transport(self) -> ports.Transport:
        return self.value.transport


@dataclasses.dataclass(frozen=True)
class ScmNode:
    """One SCM as the configuration describes it."""

    service_id: str | None
    node_id: str | None
    host: str


def _split_list(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _host_of(key: str, value: str) -> str:
    """The host part of ``value`` (``host`` or ``host:port``), checked; ConfigError names ``key``."""
    return split_host_port(key, value)[0]


def service_id(get: Getter) -> str | None:
    """The SCM service id: ozone.scm.default.service.id, else the first of ozone.scm.service.ids."""
    default_id = (get("ozone.scm.default.service.id") or "").strip()
    if default_id:
        return default_id
    ids = _split_list(get("ozone.scm.service.ids"))
    return ids[0] if ids else None


def scm_nodes(get: Getter) -> list[ScmNode]:
    """Every SCM of the cluster, from ozone.scm.nodes.<svc> or else ozone.scm.names. A retired
    ``ozone.scm.<x>.hadoop-rpc.*`` key raises ConfigError naming the renames."""
    nodes = _scm_nodes(get)
    suffixes = ["", *dict.fromkeys(f".{n.service_id}" for n in nodes if n.service_id)]
    suffixes += [f".{n.service_id}.{n.node_id}" for n in nodes if n.service_id and n.node_id]
    problem = ports.retired_key_problem(get, suffixes)
    if problem is not None:
        raise ConfigError(problem)
    return nodes


def _scm_nodes(get: Getter) -> list[ScmNode]:
    svc = service_id(get)
    if svc:
        nodes = []
        for node_id in _split_list(get(f"ozone.scm.nodes.{svc}")):
            key = f"ozone.scm.address.{svc}.{node_id}"
            nodes.append(ScmNode(svc, node_id, _host_of(key, get(key) or "127.0.0.1")))
        if nodes:
            return nodes
    names = _split_list(get("ozone.scm.names"))
    if names:
        return [ScmNode(None, None, _host_of("ozone.scm.names", n)) for n in names]
    client_addr = get("ozone.scm.client.address")
    host = _host_of("ozone.scm.client.address", client_addr) if client_addr else "127.0.0.1"
    return [ScmNode(None, None, host)]


def _node_entry(get: Getter, key: str, node: ScmNode) -> tuple[str, str] | None:
    """The per-node suffixed key if set, else the plain key: (the key that held it, the value)."""
    if node.service_id and node.node_id:
        suffixed = f"{key}.{node.service_id}.{node.node_id}"
        value = get(suffixed)
        if value:
            return suffixed, value
    value = get(key)
    return (key, value) if value else None


def configured(get: Getter, protocol: Protocol, node: ScmNode) -> bool:
    """Whether ``protocol``'s port or address key is set for ``node`` (per-node or plain)."""
    return (
        _node_entry(get, protocol.port_key, node) is not None
        or _node_entry(get, protocol.address_key, node) is not None
    )


def port_of(get: Getter, protocol: Protocol, node: ScmNode) -> int:
    """Port of ``protocol`` on ``node``: per-node suffix key, then the plain key, then the default."""
    entry = _node_entry(get, protocol.port_key, node)
    if entry:
        return parse_port(*entry)
    # ozone.scm.client.address may carry host:port too (single-SCM form).
    addr = _node_entry(get, protocol.address_key, node)
    if addr:
        port = split_host_port(*addr)[1]
        if port:
            return port
    return protocol.default_port


def address_of(get: Getter, protocol: Protocol, node: ScmNode) -> str:
    return f"{node.host}:{port_of(get, protocol, node)}"


def protocol_addresses(get: Getter, protocol: Protocol) -> list[str]:
    """host:port of ``protocol`` on every SCM (the client's default failover list)."""
    return [address_of(get, protocol, n) for n in scm_nodes(get)]


def find_node(get: Getter, node_id: str | None) -> ScmNode:
    """The configured SCM called ``node_id`` (or the only/first one when None or unknown)."""
    nodes = scm_nodes(get)
    for n in nodes:
        if node_id and n.node_id == node_id:
            return n
    return nodes[0]


def leader_address(get: Getter, protocol: Protocol, leader_id: str) -> str | None:
    """Address of ``protocol`` on the SCM whose node id is ``leader_id``, if configured."""
    for n in scm_nodes(get):
        if n.node_id == leader_id:
            return address_of(get, protocol, n)
    return None


def http_address(get: Getter, node: ScmNode) -> tuple[str, int]:
    entry = _node_entry(get, "ozone.scm.http-address", node)
    if entry is None:
        return "0.0.0.0", 9876
    host, port = split_host_port(*entry, default_port=9876)
    return host or "0.0.0.0", port if port is not None else 9876


def https_address(get: Getter, node: ScmNode) -> tuple[str, int]:
    """The web UI's HTTPS bind address: ozone.scm.https-address (per-node or plain), default 0.0.0.0:9877."""
    entry = _node_entry(get, "ozone.scm.https-address", node)
    if entry is None:
        return "0.0.0.0", 9877
    host, port = split_host_port(*entry, default_port=9877)
    return host or "0.0.0.0", port or 9877


def bind_host(get: Getter, protocol: Protocol, node: ScmNode) -> str:
    """Bind host: ozone.scm.<x>.bind.host if set, else the node's configured host."""
    bind_key = protocol.value.bind_host_key
    entry = _node_entry(get, bind_key, node)
    return check_host(*entry, example="0.0.0.0") if entry else node.host

"""Checked parsing of network configuration values: ports, hosts, ``host:port`` pairs and ids.

Called by the typed groups (:mod:`scm_server.conf.groups`), the endpoint lookups
(:mod:`scm_server.server.endpoints`, shared by the daemon, the CLI and the simulator) and HA
bootstrap. Pure functions of (key, value): a malformed value raises
:class:`~scm_server.exceptions.ConfigError` naming the key that held it, the value and an example,
so every path reports it as one line. No name resolution here (a well-formed name that does not
resolve is reported where it is used).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from scm_server.conf import ports
from scm_server.exceptions import ConfigError

# RFC 1123 labels, plus '_' (seen in container and Kubernetes names); a trailing dot is allowed.
_HOST_RE = re.compile(r"^(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                      r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$")


_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def check_name(key: str, value: str, what: str, example: str) -> str:
    """A service or node id: it becomes part of other keys, so letters, digits, '.', '_' and '-' only."""
    if not _NAME_RE.match(value):
        raise ConfigError(
            f"{key}: invalid {what} {value!r}; use letters, digits, '.', '_' or '-' (e.g. {key}={example})"
        )
    return value


def parse_port(key: str, value: str) -> int:
    """A TCP port, 1-65535."""
    text = value.strip()
    if not text.isdigit() or len(text) > 5 or not 1 <= int(text) <= 65535:
        raise ConfigError(f"{key}: invalid port {value!r}; use a number from 1 to 65535 (e.g. {key}=9860)")
    return int(text)


def check_host(key: str, value: str, example: str = "scm1.example.com") -> str:
    """A hostname or an IP address (IPv6 with or without brackets); returns it stripped."""
    text = value.strip()
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if _HOST_RE.match(bare):
        return text
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        raise ConfigError(
            f"{key}: invalid host {value!r}; use a hostname or an IP address (e.g. {key}={example})"
        ) from None
    return text


def split_host_port(key: str, value: str, *, default_port: int | None = None) -> tuple[str, int | None]:
    """``host:port`` (or ``host`` alone, or ``[v6]:port``): the host checked, the port parsed.

    ``default_port`` None means a missing port is returned as None."""
    text = value.strip()
    if text.startswith("["):  # [v6] or [v6]:port
        end = text.find("]")
        host, rest = text[: end + 1], text[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            raise ConfigError(f"{key}: invalid address {value!r}; use host:port (e.g. {key}=[::1]:9876)")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None  # a bare host, or a bare IPv6 address
    if not host:
        raise ConfigError(f"{key}: invalid address {value!r}: no host; use host:port (e.g. {key}=0.0.0.0:9876)")
    check_host(key, host)
    if port_text is None:
        return host, default_port
    return host, parse_port(key, port_text)


# The SCM's endpoint keys, each also taken with Ozone's per-node suffix (``.<serviceId>.<nodeId>``)
PORT_KEYS: tuple[str, ...] = (*(p.port_key for p in ports.ALL), "ozone.scm.ratis.port", "ozone.scm.grpc.port")
ADDRESS_KEYS: tuple[str, ...] = (*(p.address_key for p in ports.ALL), "ozone.scm.http-address",
                                 "ozone.scm.https-address", "ozone.scm.address", "ozone.scm.names")


def _base_of(key: str, bases: tuple[str, ...]) -> str | None:
    """The base key ``key`` is, plain or with a suffix (``.<serviceId>``, ``.<serviceId>.<nodeId>``), else None."""
    for base in bases:
        if key == base or key.startswith(base + "."):
            return base
    return None


def check_endpoint_keys(conf: Mapping[str, str]) -> None:
    """Parse every SCM port and address key set in ``conf``, plain or per node, whether or not the caller reads it.

    The admin CLI reads only the gRPC client ports, so a malformed ``ozone.scm.client.port`` (Hadoop RPC) used to
    pass it silently; the daemon, the CLI, the simulator and freon all call this first, so any malformed port
    stops them with one line naming the key (in key order, so the same configuration always names the same key).
    Port keys (``ozone.scm.<x>.port``, ``ozone.scm.<x>.grpc.port``, ``ozone.scm.ratis.port``,
    ``ozone.scm.grpc.port``) take a port; address keys (``ozone.scm.<x>.address``, ``ozone.scm.<x>.grpc.address``,
    ``ozone.scm.http-address``, ``ozone.scm.https-address``, ``ozone.scm.address.<svc>.<node>``, and each item of
    ``ozone.scm.names``) take ``host`` or ``host:port``. An empty value is unset, as every reader takes it."""
    for key in sorted(conf):
        value = conf[key]
        if not value.strip():
            continue
        if _base_of(key, PORT_KEYS) is not None:
            parse_port(key, value)
        elif _base_of(key, ADDRESS_KEYS) is not None:
            for item in value.split(",") if key.startswith("ozone.scm.names") else [value]:
                if item.strip():
                    split_host_port(key, item)

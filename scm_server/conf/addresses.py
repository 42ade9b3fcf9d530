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

"""Client failover settings, with Ozone's ``SCMClientConfig`` keys and defaults.

``hdds.scmclient.failover.max.retry`` (15), ``hdds.scmclient.failover.retry.interval`` (2s)
and ``hdds.scmclient.rpc.timeout`` (15m). Parsed once at the edge from any ``get(key)`` lookup
so the client itself stays free of configuration plumbing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from scm_server.exceptions import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_seconds(key: str, value: str, default_unit: str = "ms") -> float:
    """Ozone-style duration (``30s``, ``5m``, ``100ms``, plain number = ``default_unit``)."""
    match = _DURATION.match(value)
    if not match:
        raise ConfigError(f"{key}: cannot parse duration {value!r}; use e.g. 2s, 500ms or 5m")
    unit = (match.group(2) or default_unit).lower()
    return float(match.group(1)) * _UNIT_SECONDS[unit]


@dataclasses.dataclass(frozen=True)
class SCMClientConfig:
    max_retries: int = 15
    retry_interval: float = 2.0
    rpc_timeout: float = 900.0

    @classmethod
    def from_getter(cls, get: Callable[[str], str | None]) -> SCMClientConfig:
        max_retry = get("hdds.scmclient.failover.max.retry")
        interval = get("hdds.scmclient.failover.retry.interval")
        timeout = get("hdds.scmclient.rpc.timeout")
        try:
            retries = int(max_retry) if max_retry else cls.max_retries
        except ValueError as exc:
            raise ConfigError(
                f"hdds.scmclient.failover.max.retry: {max_retry!r} is not an integer; use e.g. 15"
            ) from exc
        return cls(
            max_retries=retries,
            retry_interval=(
                parse_duration_seconds("hdds.scmclient.failover.retry.interval", interval)
                if interval
                else cls.retry_interval
            ),
            rpc_timeout=(
                parse_duration_seconds("hdds.scmclient.rpc.timeout", timeout) if timeout else cls.rpc_timeout
            ),
        )

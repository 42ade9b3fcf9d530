"""Client failover settings, with Ozone's ``SCMClientConfig`` keys and defaults.

``hdds.scmclient.failover.max.retry`` (15), ``hdds.scmclient.failover.retry.interval`` (2s)
and ``hdds.scmclient.rpc.timeout`` (15m, the overall deadline of one call, retries included).
The client also reads the Raft election timeout (``ozone.scm.ha.ratis.leader.election.timeout``,
1s by default, the same key the SCMs read) and derives from it how fast it gives up on an SCM that
does not answer and how long it keeps failing over (see :mod:`scm_server.client.failover`).
Parsed once at the edge from any ``get(key)`` lookup so the client itself stays free of
configuration plumbing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from scm_server.exceptions import ConfigError
from scm_server.grpc_options import liveness_from_election_timeout

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

ELECTION_TIMEOUT_KEY = "ozone.scm.ha.ratis.leader.election.timeout"


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
    election_timeout: float = 1.0

    @property
    def liveness(self) -> float:
        """Seconds an SCM may leave a liveness PING unanswered during a call before it counts as gone."""
        return liveness_from_election_timeout(self.election_timeout)

    @property
    def connect_timeout(self) -> float:
        """Seconds to wait for a connection (HTTP/2 handshake) before trying another SCM."""
        return 2 * self.liveness

    @property
    def min_failover_window(self) -> float:
        """Never give up failing over before two elections could complete (each up to 2 x timeout)."""
        return 4 * self.election_timeout

    @property
    def suspect_for(self) -> float:
        """How long an SCM that did not answer is skipped while others are available."""
        return 2 * self.election_timeout

    @classmethod
    def from_getter(cls, get: Callable[[str], str | None]) -> SCMClientConfig:
        max_retry = get("hdds.scmclient.failover.max.retry")
        interval = get("hdds.scmclient.failover.retry.interval")
        timeout = get("hdds.scmclient.rpc.timeout")
        election = get(ELECTION_TIMEOUT_KEY)
        try:
            retries = int(max_retry) if max_retry else cls.max_retries
        except ValueError as exc:
            raise ConfigError(
                f"hdds.scmclient.failover.max.retry: {max_retry!r} is not an integer; use e.g. 15"
            ) from exc
        if retries < 0:
            raise ConfigError(f"hdds.scmclient.failover.max.retry: {retries} must be >= 0; use e.g. 15")
        config = cls(
            max_retries=retries,
            retry_interval=(
                parse_duration_seconds("hdds.scmclient.failover.retry.interval", interval)
                if interval
                else cls.retry_interval
            ),
            rpc_timeout=(
                parse_duration_seconds("hdds.scmclient.rpc.timeout", timeout) if timeout else cls.rpc_timeout
            ),
            election_timeout=parse_duration_seconds(ELECTION_TIMEOUT_KEY, election) if election else cls.election_timeout,
        )
        if config.rpc_timeout <= 0:
            raise ConfigError(f"hdds.scmclient.rpc.timeout: {timeout!r} must be > 0; use e.g. 15m")
        if config.election_timeout <= 0:
            raise ConfigError(f"{ELECTION_TIMEOUT_KEY}: {election!r} must be > 0; use e.g. 1s")
        return config

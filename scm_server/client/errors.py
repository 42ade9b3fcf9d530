"""Client-side errors that have no server-side counterpart.

Server-side failures come back as the ``SCMException`` / ``NotLeaderException`` the server
raised (rebuilt from the trailing metadata by ``scm_server.grpc_errors``). What is left is
the transport: no SCM in the address list answered within the retry budget.
"""

from __future__ import annotations

from scm_server.exceptions import SCMError


class SCMUnavailableError(SCMError):
    """No SCM could be reached (connection refused, timeout) after all failover attempts."""

    def __init__(self, address: str, reason: str, attempts: int = 1) -> None:
        super().__init__(f"cannot reach SCM at {address}: {reason} (after {attempts} attempt(s))")
        self.address = address
        self.reason = reason
        self.attempts = attempts

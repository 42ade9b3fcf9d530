"""Client-side errors that have no server-side counterpart.

Server-side failures come back as the ``SCMException`` / ``NotLeaderException`` the server
raised (rebuilt from the trailing metadata by ``scm_server.grpc_errors``). What is left is
the transport: no SCM in the address list answered within the retry budget.
"""

from __future__ import annotations

from scm_server.exceptions import SCMError
from scm_server.security.core.identity import SCM_ROLE_NAME


class SCMUnavailableError(SCMError):
    """No SCM could be reached (connection refused, timeout) after all failover attempts."""

    def __init__(self, address: str, reason: str, attempts: int = 1) -> None:
        super().__init__(f"cannot reach SCM at {address}: {reason} (after {attempts} attempt(s)){role_hint(reason)}")
        self.address = address
        self.reason = reason
        self.attempts = attempts


def role_hint(reason: str) -> str:
    """What a failed TLS name check means at an SCM port: the server is no SCM of this cluster (docs/security.md,
    "Identities and roles"), or its certificate predates role names."""
    if "Hostname Verification Check failed" not in reason:
        return ""
    return (
        f"; the server's certificate does not carry the SCM role name {SCM_ROLE_NAME}: it is not an SCM of this "
        "cluster (e.g. a datanode posing as one), or an SCM certificate issued before role names (renew it, or set "
        "ozone.scm.security.role.check=false while upgrading)"
    )

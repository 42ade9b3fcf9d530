"""SCM's own answers, through ``scm_server.client`` (the same admin API ``ozone-scm admin scm roles`` uses), never
``kubectl exec``. Called by ``main`` for the support bundle. Members are dialled on their Pod IPs (inter-SCM gRPC
port), which works wherever Pods are reachable; where they are not, or the ring requires mutual TLS, the caller
falls back to the operator's view in status."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from ozone_scm_operator.naming import PORTS
from scm_server.client.ha_admin import HAAdminClient


async def _roles(addresses: Sequence[str], timeout: float) -> dict[str, Any]:
    async with HAAdminClient(list(addresses), rounds=1, timeout=timeout) as c:
        roles = await asyncio.wait_for(c.roles(timeout=timeout), timeout + 2)
    return {
        "answeredBy": roles.answered_by, "leaderId": roles.leader_id, "term": roles.term,
        "commitIndex": roles.commit_index, "asked": roles.asked, "answers": roles.answers,
        "peers": [{**{k: v for k, v in dataclasses.asdict(p).items()}, "line": p.line, "nodeId": p.node_id}
                  for p in roles.peers],
    }


def roles(pod_ips: Sequence[str], timeout: float = 3.0) -> dict[str, Any] | None:
    """Every member asked at once (``GetScmRatisRoles``); None when none answered in time."""
    addresses = [f"[{ip}]:{PORTS['inter-scm']}" if ":" in ip else f"{ip}:{PORTS['inter-scm']}" for ip in pod_ips]
    if not addresses:
        return None
    try:
        result = asyncio.run(_roles(addresses, timeout))
    except Exception:  # not answering is an observation: the bundle then carries the operator's view
        return None
    return result if result.get("answers") else None

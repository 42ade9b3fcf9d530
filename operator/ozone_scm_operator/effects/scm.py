"""The SCMs, as the operator reaches them: only through ``scm_server.client`` (``HAAdminClient``), never SCM internals.

Called by the reconciler. Members are reached by Pod IP on the inter-SCM port (``ozone.scm.grpc.port``, 9895), which
works from anywhere that reaches Pods, without depending on cluster DNS from the operator's own Pod. Each probe
has a short deadline: an SCM that does not answer quickly is simply not observed this pass.

* ``probe``: one SCM's own view (``GetScmInfo``): cluster ID, scmUuid, the leader it knows, term;
* ``ring``: the leader's view of the ring (``GetScmRatisRoles`` answered by the leader: roles and lag per peer);
* ``transfer`` and ``decommission``: leadership transfer and RemoveSCM, sent to the leader (the client follows
  NotLeader hints and skips unreachable SCMs by itself).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence

from ozone_scm_operator import naming
from ozone_scm_operator.model import PeerObs, RingObs, SCMObs
from scm_server.client.ha_admin import HAAdminClient

LOG = logging.getLogger(__name__)


def grpc_address(pod_ip: str) -> str:
    host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
    return f"{host}:{naming.PORTS['grpc']}"


class SCMAdmin:
    def __init__(self, *, probe_timeout: float = 2.0, admin_timeout: float = 30.0) -> None:
        self.probe_timeout = probe_timeout
        self.admin_timeout = admin_timeout

    async def probe(self, member: str, pod_ip: str) -> SCMObs | None:
        try:
            async with HAAdminClient([grpc_address(pod_ip)], rounds=1, timeout=self.probe_timeout) as c:
                info = await asyncio.wait_for(c.scm_info(), self.probe_timeout + 1)
        except Exception as exc:  # not answering is an observation, not an error
            LOG.debug("SCM %s (%s) did not answer GetScmInfo: %s", member, pod_ip, exc)
            return None
        return SCMObs(
            member=member,
            cluster_id=info.clusterId,
            scm_id=info.scmId,
            leader_id=info.leaderId or None,
            term=info.term,
        )

    async def probe_all(self, pods: Mapping[str, str]) -> dict[str, SCMObs]:
        """member -> its answer, for members (name -> Pod IP) that answered."""
        names = list(pods)
        answers = await asyncio.gather(*(self.probe(n, pods[n]) for n in names))
        return {n: a for n, a in zip(names, answers, strict=True) if a is not None}

    async def ring(self, leader_ip: str) -> RingObs | None:
        try:
            async with HAAdminClient([grpc_address(leader_ip)], rounds=1, timeout=self.probe_timeout) as c:
                roles = await asyncio.wait_for(c.roles(), self.probe_timeout + 1)
        except Exception as exc:
            LOG.debug("the leader at %s did not answer GetScmRatisRoles: %s", leader_ip, exc)
            return None
        if not roles.leader_id or roles.answered_by != roles.leader_id:
            return None  # only the leader's view carries lags and is authoritative about membership
        return RingObs(
            leader_scm_id=roles.leader_id,
            term=roles.term,
            commit_index=roles.commit_index,
            peers=tuple(PeerObs(scm_id=p.peer_id, role=p.role, lag=p.lag, host=p.host) for p in roles.peers),
        )

    async def transfer(self, pod_ips: Iterable[str], to_scm_id: str) -> str:
        async with HAAdminClient([grpc_address(ip) for ip in pod_ips], rounds=3, timeout=self.admin_timeout) as c:
            return await c.transfer(to_scm_id)

    async def decommission(self, pod_ips: Sequence[str], scm_id: str) -> str:
        async with HAAdminClient([grpc_address(ip) for ip in pod_ips], rounds=3, timeout=self.admin_timeout) as c:
            return await c.decommission(scm_id)

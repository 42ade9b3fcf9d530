"""How a follower answers over Hadoop RPC, shared by every translator (Ozone's ``RatisUtil`` pattern).

A call that only the leader may answer, reaching a follower, is an RPC ERROR naming
``org.apache.hadoop.hdds.ratis.ServerNotLeaderException`` whose message suggests the leader as
``Server:<host>:<port>`` — the host of the leader's configured address and *the port of the protocol that
was called* (the block translator suggests the leader's Hadoop RPC block port, the location translator
its Hadoop RPC client port), the form Ozone's ``SCMFailoverProxyProviderBase`` matches against its
proxies. A leader whose lease ran out (or an unknown leader) answers without a hint.

A leader that is not ready yet (elected, but it has not applied its own term's first entry, so its memory may
miss earlier terms' writes) answers ``org.apache.hadoop.hdds.scm.ha.RetriableWithNoFailoverException`` wrapping
Ratis's ``LeaderNotReadyException``, as Ozone's ``RatisUtil.checkRatisException`` does; Ozone's failover proxy
retries the same SCM for it instead of failing over.
"""

from __future__ import annotations

import logging

from scm_server import hadoop_ipc as codec
from scm_server.exceptions import NotLeaderException
from scm_server.hadoop_ipc import ErrorCode
from scm_server.protocols import LeaderRole
from scm_server.server import endpoints
from scm_server.server.hadoop_rpc.server import RpcCallError

LOG = logging.getLogger(__name__)


class Leadership:
    """The leader checks and ServerNotLeaderException answers of one translator on one SCM."""

    def __init__(
        self, scm: LeaderRole, get: endpoints.Getter, protocol: endpoints.Protocol, self_name: str, hostname: str
    ) -> None:
        self.scm = scm
        self.get = get
        self.protocol = protocol  # whose port the hint names
        self.self_name = self_name  # how this SCM names itself (its scm id)
        self.hostname = hostname

    def require_leader(self) -> None:
        """Raises NotLeaderException on a follower (the facade's own check), and the RPC error Ozone answers
        for a leader that is not ready yet."""
        self.scm.require_leader()
        if not self.scm.is_leader_ready():
            raise RpcCallError(codec.RETRIABLE_NO_FAILOVER, codec.leader_not_ready_message(self.self_name),
                               ErrorCode.ERROR_APPLICATION)

    def error(self, exc: NotLeaderException) -> RpcCallError:
        return RpcCallError(codec.SERVER_NOT_LEADER, self.message(exc), ErrorCode.ERROR_APPLICATION)

    def message(self, exc: NotLeaderException) -> str:
        """Ozone's ServerNotLeaderException text: ``SCM Server:<id>(<host>) is not the leader.`` then
        ``Suggested leader is Server:<host>:<port>.`` or ``Could not determine the leader node.``"""
        return codec.not_leader_message("SCM", self.self_name, self.hostname, self.leader_address(exc))

    def leader_address(self, exc: NotLeaderException) -> str | None:
        if not exc.leader_id:
            return None
        try:
            return endpoints.leader_address(self.get, self.protocol, self.scm.node_id_of_peer(exc.leader_id))
        except Exception:  # a misconfigured peer must not hide the answer: no hint then
            LOG.exception("cannot resolve the %s address of leader %s", self.protocol.name, exc.leader_id)
            return None

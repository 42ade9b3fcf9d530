"""SCMHAManagerStub: a single non-Raft SCM (Ozone's SCMHAManagerStub / MockSCMHAManager).

``submit_request`` applies the request at once through the dispatcher, advances a local
monotonically increasing index (continuing from the persisted #TRANSACTIONINFO) and flushes the
transaction buffer, so every replicated write is durable together with its index before the
call returns. A fatal apply error discards the unflushed batch and raises SCMFatalError.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from scm_server.conf import SCMNodeDetails
from scm_server.exceptions import ResultCodes, SCMException, SCMFatalError
from scm_server.ha.scm_ha_manager_api import RingMembership, SCMHAHost
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore
from scm_server.proto import scm_ratis_pb2

STUB_TERM = 0


class SCMHAManagerStub:
    def __init__(self, metadata_store: SCMMetadataStore | None = None, **_: Any) -> None:
        """``metadata_store`` is accepted for symmetry with SCMHAManagerImpl; the buffer comes from attach()."""
        self.metadata_store = metadata_store
        self._host: SCMHAHost | None = None
        self._index = 0
        self.started = False

    def attach(self, scm: SCMHAHost) -> None:
        self._host = scm
        self._index = scm.transaction_buffer.latest_trx_info().index

    @property
    def host(self) -> SCMHAHost:
        if self._host is None:
            raise RuntimeError("SCMHAManagerStub used before attach()")
        return self._host

    @property
    def transaction_buffer(self) -> SCMHADBTransactionBuffer:
        return self.host.transaction_buffer

    async def start(self) -> None:
        self.started = True
        self.host.on_become_leader(self.host.scm_context.term)
        self.host.on_leader_ready()

    async def stop(self) -> None:
        if self._host is not None and self.started:
            self._host.transaction_buffer.flush_if_needed()
        self.started = False

    async def submit_request(
        self, request: scm_ratis_pb2.SCMRatisRequestProto, *, client_call: tuple[bytes, int] | None = None
    ) -> scm_ratis_pb2.SCMRatisResponseProto:
        return self.apply(request)  # one SCM: the edge's response cache dedupes client retries

    def apply(self, request: scm_ratis_pb2.SCMRatisRequestProto) -> scm_ratis_pb2.SCMRatisResponseProto:
        host = self.host
        buffer = host.transaction_buffer
        try:
            response = host.dispatcher.apply_request(request)
        except SCMException as exc:
            buffer.discard()
            raise SCMFatalError(f"fatal error applying {request.method.name}: {exc}") from exc
        except Exception as exc:
            buffer.discard()
            raise SCMFatalError(f"unexpected error applying {request.method.name}: {exc!r}") from exc
        self._index += 1
        buffer.update_latest_trx_info(STUB_TERM, self._index)
        buffer.flush()
        return response

    def is_leader(self) -> bool:
        return True

    def get_leader(self) -> tuple[str, str] | None:
        scm_id = self.host.storage_config.scm_id or ""
        return (scm_id, socket.gethostname())

    def leader_peer_id(self) -> str | None:
        return None  # no Raft: no peer ids

    def node_of_peer(self, peer_id: str) -> SCMNodeDetails | None:
        return None  # no ring configured

    def leader_node(self) -> SCMNodeDetails | None:
        return None  # no ring configured

    def ring_membership(self) -> RingMembership | None:
        return None  # no Raft

    def raft_role(self) -> str | None:
        return None  # no Raft

    def metrics_collector(self) -> None:
        return None  # no Raft

    def set_decommission_hook(self, hook: Callable[[str, str], Awaitable[None]]) -> None:
        return None  # no ring: no SCM is ever removed from it

    def dn_reports_ready(self) -> bool:
        return True  # nothing to catch up with

    def check_dn_reports_allowed(self) -> None:
        return None  # nothing to catch up with

    def leader_lease_remaining(self) -> float:
        return math.inf  # no peers to lose: the lease never runs out

    async def transfer_leadership(self, target: str | None) -> str:
        raise SCMException(
            ResultCodes.INVALID_REQUEST,
            "this SCM runs without Raft (a single SCM): there is no other member to transfer leadership to",
        )

    async def add_scm(self, scm_id: str, ratis_address: str, node_id: str = "") -> str:
        raise SCMException(
            ResultCodes.INVALID_REQUEST,
            f"this SCM runs without Raft (a single SCM): SCM {scm_id} cannot join it; start the SCMs with HA",
        )

    async def remove_scm(self, scm_id: str) -> str:
        raise SCMException(
            ResultCodes.INVALID_REQUEST,
            f"this SCM runs without Raft (a single SCM): there is no ring to remove SCM {scm_id} from",
        )

    def peer_roles(self) -> list[str]:
        scm_id = self.host.storage_config.scm_id or ""
        return [f"{socket.gethostname()}:0:LEADER:{scm_id}:127.0.0.1"]

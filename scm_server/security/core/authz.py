"""Who may call what: the authorization table of every mutually authenticated gRPC service (pure).

Who calls it: the server interceptor of :mod:`scm_server.security.tls`, once per call, with the
identity read from the peer's certificate (which the TLS handshake already verified against the
cluster's root CA). It must not do I/O; the table is data.

Access levels, from the narrowest:

* ``SCM``: another SCM (its sub-CA certificate): Raft, checkpoint download, AddSCM;
* ``DATANODE``: a datanode (the datanode protocol; the servicer also checks that a datanode
  reports as itself, its uuid = the certificate's OU), or an administrator's tooling;
* ``ADMIN``: an administrator: a client certificate whose CN is in ``ozone.administrators``
  (``*`` = every user), or an SCM (the service identity, as Ozone's SCM login user is a
  superuser). Datanodes and OMs are never administrators, whatever their name;
* ``BLOCK_CLIENT``: anyone but a datanode (OM, users, SCMs): the block protocol;
* ``MEMBER``: any authenticated identity of the cluster: reads.

Ozone checks the same admin operations (``checkAdminAccess``: container allocation/close,
pipeline changes, safemode exit, replication manager start/stop, datanode decommission and
maintenance, leadership transfer, SCM decommission) and answers others "Access denied for user X.
SCM superuser privilege is required". A method missing from the table needs ``ADMIN``, so a new
RPC is never open by accident.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Mapping

from scm_server.security.core.identity import Identity, Role


class Access(enum.Enum):
    MEMBER = "MEMBER"
    BLOCK_CLIENT = "BLOCK_CLIENT"
    DATANODE = "DATANODE"
    SCM = "SCM"
    ADMIN = "ADMIN"


RAFT_PEER = "scm.raft.RaftPeer"
RAFT_ADMIN = "scm.raft.RaftAdmin"
INTER_SCM = "hadoop.hdds.scm.ha.InterSCMProtocolService"
DATANODE_PROTOCOL = "hadoop.hdds.StorageContainerDatanodeProtocolService"
BLOCK_PROTOCOL = "hadoop.hdds.ScmBlockLocationProtocolService"
LOCATION_PROTOCOL = "hadoop.hdds.StorageContainerLocationProtocolService"
SECURITY_ADMIN = "hadoop.hdds.security.SCMSecurityAdminProtocolService"
AUDIT_EXPORT = "hadoop.hdds.scm.audit.SCMAuditProtocolService"

_A = Access
POLICY: dict[str, dict[str, Access]] = {
    RAFT_PEER: {"Deliver": _A.SCM, "RequestVote": _A.SCM, "TimeoutNow": _A.SCM, "InstallSnapshot": _A.SCM},
    RAFT_ADMIN: {"Status": _A.MEMBER},
    INTER_SCM: {
        "Download": _A.SCM,
        "GetScmInfo": _A.MEMBER,
        "AddSCM": _A.SCM,
        "RemoveSCM": _A.ADMIN,
        "GetScmRatisRoles": _A.MEMBER,
        "TransferLeadership": _A.ADMIN,
        "GetTableDigests": _A.MEMBER,
    },
    DATANODE_PROTOCOL: {"GetVersion": _A.DATANODE, "Register": _A.DATANODE, "SendHeartbeat": _A.DATANODE},
    BLOCK_PROTOCOL: {
        "AllocateScmBlock": _A.BLOCK_CLIENT,
        "DeleteScmKeyBlocks": _A.BLOCK_CLIENT,
        "GetScmInfo": _A.MEMBER,
    },
    LOCATION_PROTOCOL: {
        "AllocateContainer": _A.ADMIN,
        "GetContainer": _A.MEMBER,
        "GetContainerWithPipeline": _A.MEMBER,
        "ListContainer": _A.MEMBER,
        "CloseContainer": _A.ADMIN,
        "ListPipelines": _A.MEMBER,
        "AllocatePipeline": _A.ADMIN,
        "ClosePipeline": _A.ADMIN,
        "ActivatePipeline": _A.ADMIN,
        "DeactivatePipeline": _A.ADMIN,
        "InSafeMode": _A.MEMBER,
        "ForceExitSafeMode": _A.ADMIN,
        "GetSafeModeRuleStatuses": _A.MEMBER,
        "StartReplicationManager": _A.ADMIN,
        "StopReplicationManager": _A.ADMIN,
        "GetReplicationManagerStatus": _A.MEMBER,
        "GetReplicationManagerReport": _A.MEMBER,
        "QueryNode": _A.MEMBER,
        "DecommissionNodes": _A.ADMIN,
        "StartMaintenanceNodes": _A.ADMIN,
        "RecommissionNodes": _A.ADMIN,
        "GetScmInfo": _A.MEMBER,
    },
    SECURITY_ADMIN: {
        "ListCertificate": _A.MEMBER,
        "GetCertificateInfo": _A.MEMBER,
        "RevokeCertificates": _A.ADMIN,
        "RenewCertificate": _A.MEMBER,
        "SignCertificate": _A.ADMIN,
    },
    # The replication audit's export (proto/scm_audit.proto): the whole cluster's state, and a Raft
    # entry (the barrier), so both are administrator operations.
    AUDIT_EXPORT: {"CreateAuditBarrier": _A.ADMIN, "ExportSnapshot": _A.ADMIN},
}


@dataclasses.dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


ALLOW = Decision(True)


def split_method(full_method: str) -> tuple[str, str]:
    """``/pkg.Service/Method`` -> (``pkg.Service``, ``Method``)."""
    _, _, rest = full_method.partition("/")
    service, _, method = rest.partition("/")
    return service, method


def required_access(service: str, method: str) -> Access:
    return POLICY.get(service, {}).get(method, Access.ADMIN)


def is_admin(identity: Identity, administrators: Collection[str]) -> bool:
    if identity.role is Role.SCM:
        return True
    if identity.role is not Role.CLIENT:
        return False
    return "*" in administrators or identity.common_name in administrators


def authorize(identity: Identity, full_method: str, administrators: Collection[str]) -> Decision:
    """May ``identity`` call ``full_method``? A denial carries the message the caller sees."""
    service, method = split_method(full_method)
    need = required_access(service, method)
    role = identity.role
    if role is Role.ROOT_CA:
        return Decision(False, f"the root CA certificate ({identity.common_name}) is not a client identity")
    if need is Access.MEMBER:
        return ALLOW
    admin = is_admin(identity, administrators)
    if need is Access.ADMIN:
        if admin:
            return ALLOW
        return Decision(
            False,
            f"Access denied for {identity.name}: {method} needs SCM superuser privilege (a client certificate "
            "whose CN is listed in ozone.administrators)",
        )
    if need is Access.SCM:
        if role is Role.SCM:
            return ALLOW
        return Decision(False, f"Access denied for {identity.name}: {service}/{method} is for SCMs only")
    if need is Access.DATANODE:
        if role is Role.DATANODE or admin:
            return ALLOW
        return Decision(False, f"Access denied for {identity.name}: the datanode protocol is for datanodes only")
    if need is Access.BLOCK_CLIENT:
        if role is not Role.DATANODE:
            return ALLOW
        return Decision(False, f"Access denied for {identity.name}: datanodes may not call {method}")
    raise AssertionError(need)


def sender_denial(identity: Identity, sender: str, members: Mapping[str, str]) -> str | None:
    """Why ``identity`` may not send Raft/inter-SCM messages as member ``sender`` (None: it may).

    ``members`` maps every current member's owner ids (its scmUuid and its node id) to its Raft peer id (the
    scmUuid). A certificate's owner is the scmUuid (CA modes scm/external-root) or the node id (CA mode
    operator). The sender must be the certificate's own node: its owner is the sender, or resolves to it; a
    certificate of no current member (an SCM being added) may not use a current member's id."""
    if identity.role is not Role.SCM:
        return f"{identity.name} is not an SCM and may not send as Raft member {sender}"
    owner = identity.owner_id
    if not owner:
        return (f"the SCM certificate serial {identity.serial} names no node (no OU, no role URI owner), so it "
                f"cannot send as Raft member {sender}; issue it with OU=<node id>")
    if owner == sender:
        return None
    bound = members.get(owner)
    if bound is not None:
        if bound == sender:
            return None
        return (f"the certificate of scm:{owner} (serial {identity.serial}) belongs to Raft member {bound} "
                f"and may not send as {sender}")
    if sender in members.values():
        return (f"the certificate of scm:{owner} (serial {identity.serial}) is not Raft member {sender}'s and "
                f"may not send as it")
    return None

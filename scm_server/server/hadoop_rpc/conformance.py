"""The conformance table: every command of Ozone's SCM protocols, and what this SCM answers to it over Hadoop RPC.

docs/ozone-compatibility.md's call tables are generated from here (``make compat-docs``,
``scripts/compat_docs.py``): for each protocol, the commands are the ``Type`` enum of its wire proto in
``proto/ozone`` (Ozone's, field for field), the **served** ones are the translator's own handled set, and every
other command needs a :class:`Refusal` saying what it answers and why. A served command carries a :class:`Note`
(the rule it follows, how it is checked). :func:`table_rows` raises :class:`ConformanceError` when a command has
no row, when a refusal is kept for a command that is served, or when a note or refusal names a command the
proto does not have, so a new cmdType of Ozone's protos, or a translator gaining or losing a command, cannot
go unnoticed (``tests/unit/hadoop_rpc/test_conformance.py``).

Refusal statuses: ``not yet`` (a gap this SCM means to close; the reason says what it needs), ``refused`` (by
design; the reason says why), ``as Ozone 2.2.0`` (Ozone's own SCM does not serve it either, and this SCM answers
as it does). A protocol whose wire proto is not in ``proto/ozone`` yet gets one row saying so.

No I/O: the generator script reads and writes the document.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Literal, cast, get_args

from scm_server.protocols import StorageContainerLocationProtocol
from scm_server.server.hadoop_rpc import (
    block_translator,
    datanode_translator,
    location_translator,
    reconfigure_translator,
    secret_key_translator,
    secure_access,
    security_translator,
)

REFUSED = "refused"
RefusalStatus = Literal["not yet", "refused", "as Ozone 2.2.0"]
STATUSES: tuple[RefusalStatus, ...] = get_args(RefusalStatus)


class ConformanceError(Exception):
    """A command of Ozone's protos without a row, or a row that no longer matches the translator."""


@dataclass(frozen=True)
class Note:
    """A served command: the rule it follows (Ozone's, or where ours differs) and how it is checked."""

    note: str
    checked: str


@dataclass(frozen=True)
class Refusal:
    """A command not served: what it answers, and why."""

    status: RefusalStatus
    reason: str
    checked: str


@dataclass(frozen=True)
class Row:
    command: str
    number: int
    status: str
    note: str
    checked: str
    insecure: str = REFUSED  # what an SCM without security answers (secure_access)
    secure: str = REFUSED  # who a Kerberized SCM serves (secure_access)


@dataclass(frozen=True)
class Protocol:
    """One of Ozone's SCM protocols as this SCM serves it over Hadoop RPC."""

    key: str  # the marker name in docs/ozone-compatibility.md
    name: str  # Ozone's name of the protocol
    module: str  # the wire proto's generated module (its ``Type`` enum lists the commands)
    served: frozenset[str]
    notes: Mapping[str, Note]
    refusals: Mapping[str, Refusal]
    absent: str = ""  # the row written while the module does not exist
    service: str = ""  # a protocol of one Hadoop RPC method per call: its proto service lists the commands

    def proto(self) -> ModuleType | None:
        if importlib.util.find_spec(self.module) is None:
            return None
        return importlib.import_module(self.module)


def _location_served() -> frozenset[str]:
    """The location translator's handled set (its handlers are bound methods; no SCM is needed to list them)."""
    no_scm = cast(StorageContainerLocationProtocol, None)  # listing bound methods calls nothing on the SCM
    translator = location_translator.LocationTranslator(no_scm, lambda _key: None, "", "")
    return frozenset(translator.handlers)


BLOCK_NOTES: Mapping[str, Note] = {
    'AllocateScmBlock': Note(
        "leader only; blocks with Ozone's `Pipeline` (members with `uuid`, `uuid128`, `id`; `PipelineID` with `id` and `uuid128`); fewer blocks than asked: `FAILED_TO_ALLOCATE_ENOUGH_BLOCKS`; EC (`type=EC` with `ecReplicationConfig`): served, see [Erasure coding](#erasure-coding); EC without its layout refused naming it",
        'C, U, J',
    ),
    'DeleteScmKeyBlocks': Note(
        "leader only; per-block results as Ozone's `DeleteScmBlockResult`",
        'C, U, J',
    ),
    'GetScmInfo': Note(
        "answered by any SCM (the gRPC path's rule; Ozone answers it on the leader only — an Ozone client accepts both); also sends `peerRoles` in Ozone 2.2.0's five fields, `host:port:ROLE:peerId:ip` (the IP address of the member's host last: `scm roles --table` prints five columns and exits 255 on a line of four)",
        'C, U, J',
    ),
    'SortDatanodes': Note(
        "leader only; the named datanodes (unknown uuids dropped) nearest to the client first when the client is a datanode (by address or host name): itself, its rack, other racks; ties keep the order asked for (Ozone shuffles ties and non-datanode clients' lists)",
        'C, U, J',
    ),
    'AddScm': Note(
        "leader only; the cluster id checked first (another cluster's SCM: `success=false`, `INTERNAL_ERROR` naming `INVALID_CLUSTER_ID`, as Ozone's `addSCM` refuses it), then the HA manager's membership change adds the SCM whose Raft listens at `ratisAddr`; a single SCM without Raft refuses it with the reason",
        'C, U',
    ),
    'GetClusterTree': Note(
        'leader only; the node manager\'s racks as Ozone\'s `InnerNodeImpl.toProtobuf` writes them (default schema): root named `""` at location `""`, level 1, cost 1; each component of a network location (`/rack1`, `/dc1/rack1`) an inner node at its parent\'s path, cost 1; datanodes as leaves keyed by network name (uuid), carried whole; `numOfLeaves` per node; no location = `/default-rack`. Not yet read back by a real OM (`make ozone-interop`)',
        'C, U, J',
    ),
}
BLOCK_REFUSALS: Mapping[str, Refusal] = {
}

DATANODE_NOTES: Mapping[str, Note] = {
    'GetVersion': Note(
        '`softwareVersion`, `keys` (clusterID, scmUuid)',
        'C, U, P, J',
    ),
    'Register': Note(
        '`extendedDatanodeDetails.datanodeDetails` (uuid from `uuid`, else `id`/`uuid128`), node, container and pipeline reports, layout version; `SCMRegisteredResponseProto` (errorCode, uuid, clusterID, hostname, ...)',
        'C, U, P, J',
    ),
    'SendHeartbeat': Note(
        "every report of the request carried by name (node, incremental container, command status with deletion ACKs, container and pipeline actions, pipeline reports, command queue); the full container report read in place as Ozone's message decoded it (same names and state numbers; a negative `used` or `keyCount` is refused); the answer's commands with their id *inside* the command message (Ozone's place) and the leader's term; only the leader stamps a term; an unregistered datanode gets `reregisterCommand`",
        'C, U, P, J, S',
    ),
}
DATANODE_REFUSALS: Mapping[str, Refusal] = {
}

LOCATION_NOTES: Mapping[str, Note] = {
    'SuppressContainer': Note(
        "leader; each id marked (`suppress=true`) or unmarked through a replicated container update (Ozone's "
        "updateContainerInfo); the replication manager counts a suppressed container by state and leaves it out "
        "of its checks and commands, as Ozone's; `failedContainerIDs` lists unknown ids; `ListContainer`'s "
        "`suppressed` filter lists only (un)suppressed ones",
        'C, U',
    ),
    'ReconcileContainer': Note(
        "leader; Ozone's eligibility rules and messages (CLOSED or QUASI_CLOSED, replicas CLOSED, QUASI_CLOSED or "
        "UNHEALTHY, RATIS with more than one replica; refused with `CONTAINER_NOT_FOUND`, "
        "`UNEXPECTED_CONTAINER_STATE` or `UNSUPPORTED_OPERATION`), then a `reconcileContainerCommand` to each "
        "replica's datanode naming the others as peers, as Ozone's ReconcileContainerEventHandler",
        'C, U, O',
    ),
    'AllocateContainer': Note(
        "leader; RATIS/STAND_ALONE, and EC with `ecReplicationConfig` (an EC pipeline made on demand); `errorCode=success`; retry cache and the client's ids on the replicated write, as the gRPC path",
        'C, U, J',
    ),
    'GetContainer': Note(
        'leader',
        'C, U, J',
    ),
    'GetContainerWithPipeline': Note(
        "leader; a closed pipeline is described by the replicas' datanodes; its members with only their I/O ports (STANDALONE, RATIS, RATIS_DATASTREAM), as Ozone sends them",
        'C, U, J',
    ),
    'ListContainer': Note(
        'leader; state/type/factor filters by name, `ecReplicationConfig` keeps one EC layout (the factor filter does not apply to EC), `containerCount` = all matching; `suppressed` lists only suppressed (`true`) or unsuppressed (`false`) containers',
        'C, U, J, O',
    ),
    'QueryNode': Note(
        'leader; state and opState filters (enums by name); per node `totalVolumeCount`, `healthyVolumeCount` and `failedVolumes` from its last node report; scope `POOL`: `java.lang.IllegalArgumentException` "Not Supported yet", as Ozone; `poolName` not read (nor by Ozone)',
        'C, U, J, O',
    ),
    'CloseContainer': Note(
        'leader; `status=OK`',
        'C, U, J',
    ),
    'AllocatePipeline': Note(
        'leader; `errorCode=success`; retry cache',
        'C, U, J',
    ),
    'ListPipelines': Note(
        "leader; every port of each member, as Ozone's; no `suggestedLeaderID` (ours keeps one leader field)",
        'C, U, J',
    ),
    'ActivatePipeline': Note(
        'leader',
        'C, U, J, O',
    ),
    'DeactivatePipeline': Note(
        'leader',
        'C, U, J, O',
    ),
    'ClosePipeline': Note(
        'leader',
        'C, U, J',
    ),
    'GetScmInfo': Note(
        "any SCM; `peerRoles` (what `ozone admin scm roles` prints in 2.2.0), `host:port:ROLE:peerId:ip` as Ozone's `SCMRatisServerImpl.getRatisRoles` builds them: the host name is looked up off the caller's path, kept 30 s (a failed lookup 10 s, an empty last field meanwhile, as Ozone answers an unresolvable name), like the JVM's name cache",
        'C, U, J, O',
    ),
    'InSafeMode': Note(
        "any SCM, its own view (Ozone's follower-readable set)",
        'C, U, J',
    ),
    'ForceExitSafeMode': Note(
        "any SCM (Ozone's admin set); `exitedSafeMode` true, also when safe mode was left before, as Ozone answers",
        'C, U, J',
    ),
    'StartReplicationManager': Note(
        "any SCM (Ozone's admin set)",
        'C, U, J',
    ),
    'StopReplicationManager': Note(
        "any SCM (Ozone's admin set)",
        'C, U, J',
    ),
    'GetReplicationManagerStatus': Note(
        'leader',
        'C, U, J',
    ),
    'GetPipeline': Note(
        'leader; unknown id: `PIPELINE_NOT_FOUND`',
        'C, U, J',
    ),
    'GetContainerWithPipelineBatch': Note(
        "leader; every id in order; one id that fails fails the call (Ozone's `getContainerWithPipelineBatch`). A real OM sends it on `ozone sh key get` to refresh the blocks' pipelines",
        'C, U, J, O',
    ),
    'GetSafeModeRuleStatuses': Note(
        "any SCM (follower-readable); `statusText` always set (required in Ozone's message)",
        'C, U, J',
    ),
    'DecommissionNodes': Note(
        'leader; per-host errors as `failedHosts`',
        'C, U, J',
    ),
    'RecommissionNodes': Note(
        'leader; per-host errors as `failedHosts`',
        'C, U, J',
    ),
    'StartMaintenanceNodes': Note(
        'leader; per-host errors as `failedHosts`',
        'C, U, J',
    ),
    'DatanodeUsageInfo': Note(
        "leader; by `uuid` or `ipaddress` (IP address or host name: every datanode there), else the `count` most or least used healthy in-service datanodes by Ozone's utilization `(capacity - remaining) / capacity`; `count` < 1: an error saying it must be greater than zero; capacity, used, remaining, committed, `freeSpaceToSpare`, `reserved`, `fsCapacity` and `fsAvailable` summed over the last node report's healthy volumes, container and pipeline counts",
        'C, U, O',
    ),
    'GetExistContainerWithPipelinesInBatch': Note(
        "leader; an id that cannot be answered is left out, the others answered (Ozone's lenient batch)",
        'C, U, J',
    ),
    'StartContainerBalancer': Note(
        "leader; the request's options over the `hdds.container.balancer.*` keys, checked, recorded with `shouldRun=true` in the replicated `statefulServiceConfig` (key `ContainerBalancer`, as Ozone) so that a new leader resumes the run; `start=true`, or `start=false` with the reason (running already: Ozone's \"Expect ContainerBalancer as not running state, ...\"; safe mode; an option out of range, naming it and its key)",
        'C, U, O',
    ),
    'StopContainerBalancer': Note(
        "leader; records `shouldRun=false` (moves in flight complete on their own); never started on this ring "
        "(nothing recorded): answered without an error, as Ozone 2.2.0's SCM answers it (`containerbalancer stop` "
        "prints \"Container Balancer stopped.\"); a run recorded and ended: Ozone's message, \"Expect ContainerBalancer as running "
        "state, but running state is actually STOPPED\", as an RPC ERROR `SCMException` (**differs**: Ozone sends "
        "a plain `java.io.IOException`, which its client's failover policy retries on every SCM until its retries "
        "run out; an `SCMException` is not retried, so `containerbalancer stop` fails at once with the same text)",
        'C, U, O',
    ),
    'GetContainerBalancerStatus': Note(
        'leader; `isRunning`: whether the replicated record says the balancer runs',
        'C, U, O',
    ),
    'FinalizeScmUpgrade': Note(
        "leader; `ALREADY_FINALIZED` with no messages when the metadata layout version (MLV) is the software's (10, Ozone 2.2.0's `STORAGE_SPACE_DISTRIBUTION`); otherwise finalization starts (or resumes) on the leader and the answer is `STARTING_FINALIZATION` (`Starting Finalization`) once the replicated `#FINALIZING` mark is committed: the steps go on in the background, as HDDS-6762 intends (Ozone 2.2.0 answers after them); a new leader resumes them",
        'C, U, O',
    ),
    'QueryUpgradeFinalizationProgress': Note(
        "leader; `readonly`: this SCM's status alone, from its finalization checkpoint as Ozone's: `FINALIZATION_REQUIRED` (MLV behind, no mark), `FINALIZATION_IN_PROGRESS` (mark set), `FINALIZATION_DONE` (also on a cluster that never needed finalizing); otherwise the finalizing client's queued messages (`takeover` makes the caller that client; another client is refused with `INVALID_REQUEST`, Ozone's text)",
        'C, U, O',
    ),
    'GetContainerCount': Note(
        "leader; optional state filter (**differs**: Ozone 2.2.0's server ignores the state its own client's "
        "`getContainerCount(state)` sends and answers the total; `GetClosedContainerCount` is its way to count one state)",
        'C, U, J',
    ),
    'GetContainerReplicas': Note(
        "leader; Ozone's `SCMContainerReplicaProto` (state by name, placeOfBirth, sequenceID = BCSID)",
        'C, U, J',
    ),
    'GetReplicationManagerReport': Note(
        'leader; counters as `KeyIntValue`, samples as `ContainerID` lists',
        'C, U, J, O',
    ),
    'ResetDeletedBlockRetryCount': Note(
        '`resetCount=0`, nothing reset, as Ozone 2.2.0 answers (deprecated there)',
        'C, U',
    ),
    'GetClosedContainerCount': Note(
        "leader; the number of CLOSED containers (the request's state is not read, as in Ozone)",
        'C, U',
    ),
    'TransferLeadership': Note(
        "leader; Raft leadership moves to `newLeaderId` (any other member when empty, as Ozone picks the first non-leader peer) through our Raft's leadership transfer (the one the operator's roll uses); an unknown member: `INVALID_REQUEST`; not done in time: `TIMEOUT`; a single SCM without Raft refuses it",
        'C, U, O, I',
    ),
    'GetFailedDeletedBlocksTransaction': Note(
        'an empty list, as Ozone 2.2.0 answers (deprecated there: a transaction is no longer failed for good)',
        'C, U',
    ),
    'DecommissionScm': Note(
        'leader; the member leaves the ring through our Raft membership change (as `ozone-scm admin scm decommission`); a refusal is `success=false` with `errorMsg` (the leader itself: "Cannot remove current leader ..."; not a member; a single SCM), as Ozone answers; on a secure ring its certificates are revoked',
        'C, U, I',
    ),
    'SingleNodeQuery': Note(
        'leader; `ozone admin datanode list --node-id`: the datanode by its 128-bit uuid; unknown: `NO_SUCH_DATANODE`',
        'C, U, J',
    ),
    'GetContainersOnDecomNode': Note(
        'leader; Ozone\'s two lists for a decommissioning or entering-maintenance datanode: `UnClosed` (containers not CLOSED or QUASI_CLOSED) and `UnderReplicated` (too few replicas on other healthy in-service datanodes); a datanode not leaving: no lists; unknown: `NO_SUCH_DATANODE` "Failed to get containers list. Unable to find required node"',
        'C, U',
    ),
    'GetMetrics': Note(
        'leader; the JMX servlet\'s JSON `{"beans": [...]}` for the query\'s object-name pattern: Ozone\'s `NodeDecommissionMetrics` bean (the totals, each leaving datanode\'s `tag.datanode.<i>`, `PipelinesWaitingToCloseDN.<i>`, `UnderReplicatedDN.<i>`, `SufficientlyReplicatedDN.<i>`, `UnclosedContainersDN.<i>`, `StartTimeDN.<i>`: what `datanode status decommission` reads) and every Ozone bean /jmx serves (`SCMNodeMetrics`, `ReplicationManagerMetrics`, `SafeModeMetrics`, ...; see "Ozone\'s metric and bean names"); a query matching none answers `{"beans": []}`',
        'C, U, O',
    ),
    'GetContainerBalancerStatusInfo': Note(
        "leader; `isRunning=false` without status info when no run is recorded as running (Ozone's answer when no balancer task exists); while one runs: `startedAt`, the recorded configuration and each iteration this leader ran (result, sizes scheduled and moved, moves scheduled/completed/failed/timed out, data entering and leaving each datanode, duration)",
        'C, U',
    ),
    'GetDeletedBlocksTransactionSummary': Note(
        'leader; `totalTransactionCount` and `totalBlockCount` of the deleted-block log; `totalBlockSize` and `totalBlockReplicatedSize` left out (block sizes are not kept in the log)',
        'C, U, O',
    ),
    'GetContainerToken': Note(
        "leader; administrators (`ozone.administrators`); Ozone's container token signed with the current secret key (the SCMSecretKeyProtocol table); an empty token with container tokens off (what Hadoop's Java client checks); with Kerberos an unauthenticated caller is refused",
        'C, U, J',
    ),
    'ListContainerIDs': Note(
        'leader; ids from `startContainerID` (inclusive), at most `count`, optional state filter',
        'C, U',
    ),
}
LOCATION_REFUSALS: Mapping[str, Refusal] = {
    'DeleteContainer': Refusal(
        'as Ozone 2.2.0',
        'not served by Ozone 2.2.0\'s SCM either (its translator has no case for it): the same RPC ERROR `java.lang.IllegalArgumentException` "Unknown command type: DeleteContainer"',
        'C, U',
    ),
}

SECURITY_NOTES: Mapping[str, Note] = {
    'GetCertificate': Note(
        'by serial (decimal, as Ozone writes it; canonicalised); unknown: `CERTIFICATE_NOT_FOUND`; malformed: `GET_CERTIFICATE_FAILED`',
        'C, U (real CA), J (no CA)',
    ),
    'GetCACertificate': Note(
        "this SCM's CA certificate as `x509Certificate` and `x509CACertificate`, plus the root when this SCM does not hold the root key (Ozone's sub-CA case)",
        'C, U (real CA), J (no CA)',
    ),
    'ListCertificate': Note(
        "by role (Ozone's `NodeType` by name), from `startCertId`, at most `count`",
        'C, U (real CA), J (no CA)',
    ),
    'GetRootCACertificate': Note(
        'the current root as `x509Certificate` and `x509RootCACertificate`',
        'C, U (real CA), J (no CA)',
    ),
    'ListCACertificate': Note(
        "the SCMs' CA certificates",
        'C, U (real CA), J (no CA)',
    ),
    'GetAllRootCaCertificates': Note(
        'every root trusted now (rotation)',
        'C, U (real CA), J (no CA)',
    ),
    'GetDataNodeCertificate': Note(
        "a `dn/<host>` principal (`hdds.datanode.kerberos.principal`), for its own host, the role bound from the principal, never the CSR; the OM's principal, another host or an unauthenticated caller: `UNABLE_TO_ISSUE_CERTIFICATE` with the reason; asking again renews",
        'C, U, J (refused: unauthenticated)',
    ),
    'GetOMCertificate': Note(
        "the OM's principal (`ozone.om.kerberos.principal`), for its own host; others refused as above",
        'C, U',
    ),
    'GetCert': Note(
        'node type DATANODE or OM, as the two calls above; other node types refused',
        'C, U',
    ),
    'GetSCMCertificate': Note(
        "a joining SCM's sub-CA, as Ozone's bootstrapping SCM asks the leader: the SCM principal "
        "(`hdds.scm.kerberos.principal`) for its own host, which must be the address of exactly one configured SCM "
        "(`ozone.scm.address.<serviceId>.<nodeId>`, the site file re-read); `scmNodeId` is its scmId (a UUID), the "
        "cluster id checked, another live SCM of that node refused; asking again with `renew` gives a new sub-CA "
        "(the old one expires); others: `UNABLE_TO_ISSUE_CERTIFICATE` with the reason. Our own members still enrol "
        "at `ozone-scm scm --bootstrap` over the gRPC security service",
        'C, U',
    ),
    'RemoveExpiredCertificates': Note(
        "administrators; the leader removes expired datanode, OM and client certificates through Raft and answers their PEMs; others: `INTERNAL_ERROR` \"Access denied ...\"",
        'C, U',
    ),
}
SECURITY_REFUSALS: Mapping[str, Refusal] = {
    'GetCrls': Refusal(
        'as Ozone 2.2.0',
        '`INTERNAL_ERROR` "Unsupported operation", as Ozone 2.2.0 itself answers (no CRLs there either)',
        'C, U, J',
    ),
    'GetLatestCrlId': Refusal(
        'as Ozone 2.2.0',
        'as `GetCrls`',
        'C',
    ),
    'RevokeCertificates': Refusal(
        'refused',
        'not served over Hadoop RPC; `ozone-scm admin cert revoke` over the authenticated gRPC admin port does it',
        'C, U',
    ),
}

RECONFIGURE_NOTES: Mapping[str, Note] = {
    "getServerName": Note("every SCM; `SCM`, as Ozone's", "U, O"),
    "getReconfigureStatus": Note(
        "every SCM; the last task's start time (0 before any), and once it ended its end time and each applied "
        "change: name, old value (`\"\"` when unset), new value (left out when the key was removed), error "
        "(left out when it took effect), as Hadoop's ReconfigurableBase answers",
        "U, O",
    ),
    "startReconfigure": Note(
        "every SCM; a background task reads ozone-site.xml again and applies each changed reconfigurable key "
        "through the facade to the running managers (a value the key's group refuses: its error recorded, "
        "nothing applied); other changed keys wait for a restart; a second start while one runs: "
        "`java.io.IOException` \"Another reconfiguration task is running.\"; under Kerberos, as for `getReconfigureStatus` and "
        "`listReconfigureProperties`, callers other than administrators get Ozone's `AccessControlException` \"Access denied for user P. SCM "
        "superuser privilege is required.\" and nothing starts",
        "U, O, K",
    ),
    "listReconfigureProperties": Note(
        "every SCM; sorted: `ozone.administrators` and `ozone.readonly.administrators` (the Hadoop RPC and "
        "/logLevel administrator checks, from the next call on), the `hdds.scm.replication.*` keys this SCM "
        "declares (with `event.timeout.datanode.offset`: the deadline commands carry to datanodes), "
        "`hdds.scm.block.deletion.per-interval.max`, `ozone.scm.ec.pipeline.minimum`, "
        "`ozone.scm.ec.pipeline.per.volume.factor` and `hdds.scm.safemode.log.interval` (the periodic safemode "
        "status line). Not listed (Ozone 2.2.0 lists them): the under/over-replicated queue intervals and the "
        "quasi-closed-stuck copies keys (this ReplicationManager has no such queues or rule) and the "
        "`ozone.tracing.*` keys (no tracing)",
        "U, O",
    ),
}

SECRET_KEY_NOTES: Mapping[str, Note] = {
    'GetCurrentSecretKey': Note(
        'leader; the newest key, the same under all three protocol names; with Kerberos an unauthenticated caller is refused',
        'C, U, R',
    ),
    'GetSecretKey': Note(
        'leader; by id; an unknown id answers `getSecretKeyResponseProto` without `secretKey`, as Ozone does',
        'C, U, R',
    ),
    'GetAllSecretKeys': Note('leader; every key held, oldest first', 'C, U, R'),
    'CheckAndRotate': Note(
        "leader; administrators; `force` rotates at once, otherwise only if due; `status` says whether it rotated; others: `INTERNAL_ERROR` \"Access denied for user ...\"",
        'C, U, R',
    ),
}
SECRET_KEY_REFUSALS: Mapping[str, Refusal] = {}


def protocols() -> list[Protocol]:
    """The five SCM protocols of Ozone 2.2.0 and its ReconfigureProtocol, in the document's order."""
    return [
        Protocol("block", "ScmBlockLocationProtocol", "scm_server.proto.ozone.ScmServerProtocol_pb2", frozenset(block_translator.SUPPORTED),
                 BLOCK_NOTES, BLOCK_REFUSALS),
        Protocol("datanode", "StorageContainerDatanodeProtocol", "scm_server.proto.ozone.ScmServerDatanodeHeartbeatProtocol_pb2",
                 frozenset(datanode_translator.SERVED), DATANODE_NOTES, DATANODE_REFUSALS),
        Protocol("location", "StorageContainerLocationProtocol", "scm_server.proto.ozone.ScmAdminProtocol_pb2", _location_served(),
                 LOCATION_NOTES, LOCATION_REFUSALS),
        Protocol("security", "SCMSecurityProtocol", "scm_server.proto.ozone.ScmServerSecurityProtocol_pb2",
                 frozenset(security_translator.SERVED) | frozenset(security_translator.SERVED_AUTHENTICATED),
                 SECURITY_NOTES, SECURITY_REFUSALS),
        Protocol("secretkey", "SCMSecretKeyProtocol", "scm_server.proto.ozone.ScmSecretKeyProtocol_pb2",
                 secret_key_translator.SERVED, SECRET_KEY_NOTES, SECRET_KEY_REFUSALS),
        Protocol("reconfigure", "ReconfigureProtocol", "scm_server.proto.ozone.ReconfigureProtocol_pb2",
                 reconfigure_translator.ReconfigureTranslator.methods, RECONFIGURE_NOTES, {},
                 service="ReconfigureProtocolService"),
    ]


def commands(protocol: Protocol) -> list[tuple[str, int]] | None:
    """(name, number) of every command of the protocol's ``Type`` enum, in enum order (for a protocol of one
    method per call: its service's methods, numbered 0); None without its proto."""
    module = protocol.proto()
    if module is None:
        return None
    if protocol.service:
        return [(m.name, 0) for m in module.DESCRIPTOR.services_by_name[protocol.service].methods]
    enum = module.DESCRIPTOR.enum_types_by_name["Type"]
    return [(v.name, v.number) for v in enum.values]


def table_rows(protocol: Protocol) -> list[Row]:
    """One row per command; ConformanceError names every command without a row and every stale entry."""
    listed = commands(protocol)
    if listed is None:
        return []
    names = {name for name, _ in listed}
    problems = []
    for name, _ in listed:
        if name in protocol.served and name not in protocol.notes:
            problems.append(f"{name} is served but has no Note in conformance.{protocol.key.upper()}_NOTES")
        if name not in protocol.served and name not in protocol.refusals:
            problems.append(f"{name} has no row: serve it, or give a Refusal in conformance.{protocol.key.upper()}_REFUSALS")
        if name in protocol.served and name in protocol.refusals:
            problems.append(f"{name} is served: drop its Refusal from conformance.{protocol.key.upper()}_REFUSALS")
    for name in sorted((set(protocol.notes) | set(protocol.refusals) | protocol.served) - names):
        problems.append(f"{name} is not a command of {protocol.module.rsplit('.', 1)[-1]}")
    for name, refusal in protocol.refusals.items():
        if refusal.status not in STATUSES:
            problems.append(f"{name}: refusal status {refusal.status!r} is not one of {', '.join(STATUSES)}")
    if problems:
        raise ConformanceError(f"{protocol.key} protocol: " + "; ".join(problems))
    rows = []
    for name, number in listed:
        if name in protocol.served:
            note = protocol.notes[name]
            rule = secure_access.access(protocol.key, name)
            rows.append(Row(name, number, "served", note.note, note.checked, rule.insecure, rule.secure()))
        else:
            refusal = protocol.refusals[name]
            rows.append(Row(name, number, refusal.status, refusal.reason, refusal.checked))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(protocol: Protocol) -> str:
    """The protocol's markdown table (or its one row while its proto is absent)."""
    out = [f"| {'method' if protocol.service else 'cmdType'} | status | insecure | secure (Kerberos) | notes | checked |",
           "|---|---|---|---|---|---|"]
    rows = table_rows(protocol)
    if not rows:
        out.append(f"| (all) | not yet | — | — | {_cell(protocol.absent)} | — |")
    for r in rows:
        number = f" ({r.number})" if r.number else ""
        out.append(f"| `{r.command}`{number} | {r.status} | {_cell(r.insecure)} | {_cell(r.secure)} | "
                   f"{_cell(r.note)} | {r.checked} |")
    return "\n".join(out)


def render_summary() -> str:
    """Per protocol: how many commands Ozone 2.2.0 has, served, not yet, refused, as Ozone."""
    out = ["| protocol | commands | served | not yet | refused | as Ozone 2.2.0 |", "|---|---|---|---|---|---|"]
    for p in protocols():
        rows = table_rows(p)
        if not rows:
            out.append(f"| `{p.name}` | (no proto yet) | 0 | all | 0 | 0 |")
            continue
        count: dict[str, int] = {s: sum(1 for r in rows if r.status == s) for s in STATUSES}
        count["served"] = sum(1 for r in rows if r.status.startswith("served"))
        out.append(f"| `{p.name}` | {len(rows)} | {count['served']} | "
                   f"{count['not yet']} | {count['refused']} | {count['as Ozone 2.2.0']} |")
    return "\n".join(out)

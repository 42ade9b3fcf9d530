"""Ozone's own SCM state as bytes -> this SCM's records: the pure core of ``migrate from-ozone``.

Ozone's ``scm.db`` is a RocksDB whose column families and codecs are those of Ozone's ``SCMDBDefinition``:

=====================  ==================================  =====================================================
column family          key (Ozone's codec)                 value (Ozone's codec)
=====================  ==================================  =====================================================
containers             ContainerID: 8-byte big-endian      ContainerInfoProto (protobuf, Ozone's hdds.proto)
pipelines              PipelineID: UUID, 16 bytes (msb,    Pipeline (protobuf)
                       lsb)
deletedBlocks          txID: 8-byte big-endian             DeletedBlocksTransaction (protobuf, Ozone's datanode
                                                           protocol)
sequenceId             SequenceIdType name (UTF-8)         lastId: 8-byte big-endian
scmTransactionInfos    "#TRANSACTIONINFO"                  "term#index" (UTF-8)
move                   ContainerID                         MoveDataNodePairProto (protobuf)
validCerts,            BigInteger serial                   X.509 certificate (PEM)
validSCMCerts
meta                   string                              string (#LAYOUTVERSION, #FINALIZING)
statefulServiceConfig  service name                        serialized proto of that service
=====================  ==================================  =====================================================

Ozone's values are Ozone's wire messages (``scm_server.proto.ozone``); this SCM stores its own
(``scm_server.proto``), so each value is carried across by name (:mod:`scm_server.ozone_wire`). The sequence
ceilings are carried over as they are: every ID Ozone handed out is at most its stored ``lastId`` (Ozone allocates
a batch by raising ``lastId`` through Raft before it hands out an ID of it), so this SCM's next batch starts
above it -- provided scm.db holds every applied Raft entry, which :func:`pending_entries` checks against the
Ratis log. Nothing here reads a file or keeps time: the edge (:mod:`scm_server.migrate.from_ozone`) hands in
the bytes.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from google.protobuf import message as pb_message

from scm_server import ozone_wire
from scm_server.metadata.storage_config import CLUSTER_ID_PREFIX, parse_properties, validate_cluster_id
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.proto.ozone import hdds_pb2 as wire

# Ozone's column families (SCMDBDefinition) and the ones this migration reads
CONTAINERS = "containers"
PIPELINES = "pipelines"
DELETED_BLOCKS = "deletedBlocks"
SEQUENCE_ID = "sequenceId"
TRANSACTION_INFO = "scmTransactionInfos"
MOVE = "move"
VALID_CERTS = "validCerts"
VALID_SCM_CERTS = "validSCMCerts"
META = "meta"
STATEFUL_SERVICE_CONFIG = "statefulServiceConfig"
OZONE_COLUMN_FAMILIES = (CONTAINERS, PIPELINES, DELETED_BLOCKS, SEQUENCE_ID, TRANSACTION_INFO, MOVE,
                         VALID_CERTS, VALID_SCM_CERTS, META, STATEFUL_SERVICE_CONFIG)
# an SCM DB has these; an OM DB or any other RocksDB does not have all of them
REQUIRED_COLUMN_FAMILIES = (CONTAINERS, PIPELINES, SEQUENCE_ID, TRANSACTION_INFO)
TRANSACTION_INFO_KEY = "#TRANSACTIONINFO"
# SequenceIdType's names (Ozone's and ours are the same); "CertificateId" replaced the deprecated "certificateId"
SEQUENCE_NAMES = ("localId", "delTxnId", "containerId", "CertificateId")
DEPRECATED_SEQUENCES = {"certificateId": "CertificateId"}


class NotOzoneSCMData(ValueError):
    """The bytes are not what Ozone's SCM writes; the message names the table, the key and what is wrong."""


Table = Mapping[bytes, bytes]


def decode_long(raw: bytes, where: str) -> int:
    """Ozone's LongCodec: 8 bytes, big-endian, signed."""
    if len(raw) != 8:
        raise NotOzoneSCMData(f"{where}: {len(raw)} bytes where Ozone's LongCodec writes 8")
    return int(struct.unpack(">q", raw)[0])


def decode_uuid(raw: bytes, where: str) -> str:
    """Ozone's UuidCodec: most then least significant 64 bits, 16 bytes."""
    if len(raw) != 16:
        raise NotOzoneSCMData(f"{where}: {len(raw)} bytes where Ozone's UuidCodec writes 16")
    return str(uuid.UUID(bytes=raw))


def _parse(cls: type[pb_message.Message], raw: bytes, where: str) -> pb_message.Message:
    msg = cls()
    try:
        msg.ParseFromString(raw)
    except pb_message.DecodeError as exc:
        raise NotOzoneSCMData(f"{where}: not a {cls.DESCRIPTOR.name} ({exc})") from exc
    missing = msg.FindInitializationErrors()  # type: ignore[attr-defined]  # (the C++ and upb messages have it)
    if missing:
        raise NotOzoneSCMData(f"{where}: {cls.DESCRIPTOR.name} lacks its required {', '.join(missing)}")
    return msg


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotOzoneSCMData(f"{where}: not UTF-8 text ({exc})") from exc


def decode_container(key: bytes, value: bytes) -> hdds_pb2.ContainerInfoProto:
    cid = decode_long(key, f"{CONTAINERS} key {key.hex()}")
    where = f"{CONTAINERS}[{cid}]"
    src = _parse(wire.ContainerInfoProto, value, where)
    assert isinstance(src, wire.ContainerInfoProto)
    if src.containerID != cid:
        raise NotOzoneSCMData(f"{where}: the value names container {src.containerID}")
    try:
        out = ozone_wire.by_name(src, hdds_pb2.ContainerInfoProto)
    except ValueError as exc:
        raise NotOzoneSCMData(f"{where}: {exc}") from exc
    if src.HasField("pipelineID"):
        out.pipelineID.CopyFrom(ozone_wire.pipeline_id_from_wire(src.pipelineID))
    return out


def decode_pipeline(key: bytes, value: bytes) -> hdds_pb2.Pipeline:
    pid = decode_uuid(key, f"{PIPELINES} key {key.hex()}")
    where = f"{PIPELINES}[{pid}]"
    src = _parse(wire.Pipeline, value, where)
    assert isinstance(src, wire.Pipeline)
    try:
        out = ozone_wire.by_name(src, hdds_pb2.Pipeline)
    except ValueError as exc:
        raise NotOzoneSCMData(f"{where}: {exc}") from exc
    out.id.CopyFrom(ozone_wire.pipeline_id_from_wire(src.id))
    if out.id.id != pid:
        raise NotOzoneSCMData(f"{where}: the value names pipeline {out.id.id}")
    if not out.leaderID:
        if src.HasField("leaderID128"):
            out.leaderID = ozone_wire.uuid_text(src.leaderID128)
        elif src.HasField("leaderDatanodeID") and src.leaderDatanodeID.HasField("uuid"):
            out.leaderID = ozone_wire.uuid_text(src.leaderDatanodeID.uuid)
    return out


def decode_deleted_blocks(key: bytes, value: bytes) -> hdds_pb2.DeletedBlocksTransaction:
    tx = decode_long(key, f"{DELETED_BLOCKS} key {key.hex()}")
    where = f"{DELETED_BLOCKS}[{tx}]"
    src = _parse(wire_dn.DeletedBlocksTransaction, value, where)
    assert isinstance(src, wire_dn.DeletedBlocksTransaction)
    if src.txID != tx:
        raise NotOzoneSCMData(f"{where}: the value names transaction {src.txID}")
    try:
        return ozone_wire.by_name(src, hdds_pb2.DeletedBlocksTransaction)
    except ValueError as exc:
        raise NotOzoneSCMData(f"{where}: {exc}") from exc


def decode_move(key: bytes, value: bytes) -> tuple[int, hdds_pb2.MoveDataNodePairProto]:
    cid = decode_long(key, f"{MOVE} key {key.hex()}")
    src = _parse(wire.MoveDataNodePairProto, value, f"{MOVE}[{cid}]")
    try:
        return cid, ozone_wire.by_name(src, hdds_pb2.MoveDataNodePairProto)
    except ValueError as exc:
        raise NotOzoneSCMData(f"{MOVE}[{cid}]: {exc}") from exc


def decode_sequence_ids(table: Table) -> dict[str, int]:
    """The ``sequenceId`` table: SequenceIdType name -> lastId (the deprecated name folded into its successor,
    keeping the larger ceiling)."""
    out: dict[str, int] = {}
    for key, value in table.items():
        name = _text(key, f"{SEQUENCE_ID} key {key.hex()}")
        last = decode_long(value, f"{SEQUENCE_ID}[{name}]")
        name = DEPRECATED_SEQUENCES.get(name, name)
        if name not in SEQUENCE_NAMES:
            raise NotOzoneSCMData(f"{SEQUENCE_ID}[{name}]: not one of Ozone's SequenceIdType names {SEQUENCE_NAMES}")
        out[name] = max(last, out.get(name, last))
    return out


def decode_transaction_info(raw: bytes) -> tuple[int, int]:
    """Ozone's TransactionInfo codec: the string ``term#index``."""
    text = _text(raw, f"{TRANSACTION_INFO}[{TRANSACTION_INFO_KEY}]")
    parts = text.split("#")
    try:
        if len(parts) != 2:
            raise ValueError(text)
        return int(parts[0]), int(parts[1])
    except ValueError as exc:
        raise NotOzoneSCMData(
            f"{TRANSACTION_INFO}[{TRANSACTION_INFO_KEY}]: {text!r} is not Ozone's term#index"
        ) from exc


# ---- VERSION --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OzoneVersion:
    """What Ozone's SCM VERSION file (``<ozone.scm.db.dirs>/scm/current/VERSION``) says."""

    cluster_id: str
    scm_id: str
    primary_scm_node_id: str
    scm_ha: bool
    layout_version: int
    scm_cert_serial_id: str


def decode_version(text: str, where: str) -> OzoneVersion:
    try:
        props = parse_properties(text)
    except ValueError as exc:
        raise NotOzoneSCMData(f"{where}: not a Java properties file ({exc})") from exc
    if props.get("nodeType") != "SCM":
        raise NotOzoneSCMData(
            f"{where}: nodeType is {props.get('nodeType')!r}, not 'SCM'; give the VERSION of an Ozone SCM "
            "(<ozone.scm.db.dirs>/scm/current/VERSION)"
        )
    for required in ("clusterID", "scmUuid"):
        if not props.get(required):
            raise NotOzoneSCMData(f"{where}: no {required}; an Ozone SCM's VERSION always has one")
    try:
        cluster_id = validate_cluster_id(props["clusterID"])
        scm_id = str(uuid.UUID(props["scmUuid"]))
        layout = int(props.get("layoutVersion", "0"))
    except ValueError as exc:
        raise NotOzoneSCMData(f"{where}: {exc}") from exc
    if cluster_id != props["clusterID"]:
        raise NotOzoneSCMData(
            f"{where}: clusterID {props['clusterID']!r} is not of the form {CLUSTER_ID_PREFIX}<lower-case uuid>; "
            "datanodes and the OM compare it as written, and this SCM keeps only that form"
        )
    return OzoneVersion(
        cluster_id=cluster_id, scm_id=scm_id, primary_scm_node_id=props.get("primaryScmNodeId", scm_id),
        scm_ha=props.get("scmHA", "false").lower() == "true", layout_version=layout,
        scm_cert_serial_id=props.get("scmCertSerialId", ""),
    )


# ---- Ratis log segments ---------------------------------------------------------------------------------------

RATIS_LOG_HEADER = b"RaftLog1"
STATE_MACHINE_ENTRY = 3  # LogEntryProto: term 1, index 2, then one of stateMachineLogEntry 3, configuration 4,
CONFIGURATION_ENTRY = 4  # metadataEntry 5
METADATA_ENTRY = 5


@dataclass(frozen=True)
class LogEntry:
    term: int
    index: int
    kind: int  # STATE_MACHINE_ENTRY, CONFIGURATION_ENTRY or METADATA_ENTRY


def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise NotOzoneSCMData(f"{where}: truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise NotOzoneSCMData(f"{where}: varint longer than 10 bytes at byte {pos}")


def _log_entry(raw: bytes, where: str) -> LogEntry:
    term = index = 0
    kind = 0
    pos = 0
    while pos < len(raw):
        tag, pos = _varint(raw, pos, where)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, pos = _varint(raw, pos, where)
            if number == 1:
                term = value
            elif number == 2:
                index = value
        elif wire_type == 2:
            length, pos = _varint(raw, pos, where)
            pos += length
            if number in (STATE_MACHINE_ENTRY, CONFIGURATION_ENTRY, METADATA_ENTRY):
                kind = number
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise NotOzoneSCMData(f"{where}: wire type {wire_type} in a LogEntryProto")
    if pos != len(raw):
        raise NotOzoneSCMData(f"{where}: a LogEntryProto runs past its length")
    return LogEntry(term, index, kind)


def decode_segment(data: bytes, where: str) -> list[LogEntry]:
    """The entries of one Ratis log segment file (header ``RaftLog1``; each entry: varint length, LogEntryProto,
    4-byte checksum; a zero byte or the end of the file ends it). A torn last entry (a crash mid-write) ends it too,
    as Ratis itself treats it."""
    if not data.startswith(RATIS_LOG_HEADER):
        raise NotOzoneSCMData(f"{where}: not a Ratis log segment (no RaftLog1 header)")
    pos = len(RATIS_LOG_HEADER)
    entries: list[LogEntry] = []
    while pos < len(data) and data[pos] != 0:
        try:
            length, start = _varint(data, pos, where)
        except NotOzoneSCMData:
            break
        end = start + length
        if end + 4 > len(data):
            break
        entries.append(_log_entry(data[start:end], f"{where} byte {pos}"))
        pos = end + 4
    return entries


def pending_entries(segments: Iterable[LogEntry], applied_index: int) -> list[LogEntry]:
    """State-machine entries of the Ratis log above the index scm.db holds: what scm.db lacks. (Configuration and
    metadata entries change no table, so a log that ends in them is complete.)"""
    return [e for e in segments if e.kind == STATE_MACHINE_ENTRY and e.index > applied_index]


# ---- the plan -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Skipped:
    what: str
    count: int
    reason: str


@dataclass
class MigrationPlan:
    """Everything this SCM's store will hold, decoded, and what is left out with the reason."""

    version: OzoneVersion
    term: int
    index: int
    containers: list[hdds_pb2.ContainerInfoProto] = field(default_factory=list)
    pipelines: list[hdds_pb2.Pipeline] = field(default_factory=list)
    deleted_blocks: list[hdds_pb2.DeletedBlocksTransaction] = field(default_factory=list)
    moves: list[tuple[int, hdds_pb2.MoveDataNodePairProto]] = field(default_factory=list)
    sequence_ids: dict[str, int] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        """What a dry run prints: one line per table, then what is left out and why."""
        states: dict[str, int] = {}
        for c in self.containers:
            name = hdds_pb2.LifeCycleState.Name(c.state)
            states[name] = states.get(name, 0) + 1
        by_state = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"
        lines = [
            f"clusterID {self.version.cluster_id}, scmUuid {self.version.scm_id} "
            f"(primaryScmNodeId {self.version.primary_scm_node_id})",
            f"applied Raft entry: term {self.term}, index {self.index}",
            f"containers: {len(self.containers)} ({by_state})",
            f"pipelines: {len(self.pipelines)}",
            f"deletedBlocks transactions: {len(self.deleted_blocks)} "
            f"({sum(len(t.localID) for t in self.deleted_blocks)} blocks)",
            f"moves in flight: {len(self.moves)}",
            "sequence ceilings: " + ", ".join(f"{k}={v}" for k, v in sorted(self.sequence_ids.items())),
        ]
        lines += [f"not carried over: {s.what} ({s.count}): {s.reason}" for s in self.skipped]
        lines += [f"refused: {r}" for r in self.refusals]
        return lines


def _values(tables: Mapping[str, Table], name: str) -> list[tuple[bytes, bytes]]:
    return sorted(tables.get(name, {}).items())


def plan_migration(tables: Mapping[str, Table], version: OzoneVersion) -> MigrationPlan:
    """Decode every table Ozone's SCM wrote (column family name -> raw key -> raw value) into a plan."""
    missing = [cf for cf in REQUIRED_COLUMN_FAMILIES if cf not in tables]
    if missing:
        raise NotOzoneSCMData(
            f"no column famil{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)}: this RocksDB is not an "
            "Ozone SCM's scm.db (give <ozone.scm.db.dirs>/scm.db of a stopped Ozone SCM)"
        )
    raw_trx = tables[TRANSACTION_INFO].get(TRANSACTION_INFO_KEY.encode())
    if raw_trx is None:
        raise NotOzoneSCMData(
            f"{TRANSACTION_INFO} holds no {TRANSACTION_INFO_KEY}: this SCM never applied a Raft entry; "
            "there is nothing to migrate (start the Ozone SCM once, or use `ozone-scm scm --init` instead)"
        )
    term, index = decode_transaction_info(raw_trx)
    plan = MigrationPlan(version=version, term=term, index=index)
    plan.containers = [decode_container(k, v) for k, v in _values(tables, CONTAINERS)]
    plan.pipelines = [decode_pipeline(k, v) for k, v in _values(tables, PIPELINES)]
    plan.deleted_blocks = [decode_deleted_blocks(k, v) for k, v in _values(tables, DELETED_BLOCKS)]
    plan.moves = [decode_move(k, v) for k, v in _values(tables, MOVE)]
    plan.sequence_ids = decode_sequence_ids(tables[SEQUENCE_ID])
    ec = [c.containerID for c in plan.containers if c.replicationType == hdds_pb2.EC]
    if ec:
        plan.refusals.append(
            f"{len(ec)} erasure-coded container(s) (first: {ec[0]}): this SCM does not keep EC replication configs "
            "yet; they cannot be carried over without loss"
        )
    certs = len(tables.get(VALID_CERTS, {})) + len(tables.get(VALID_SCM_CERTS, {}))
    if certs:
        plan.refusals.append(
            f"{certs} certificate(s) in {VALID_CERTS}/{VALID_SCM_CERTS}: a secure Ozone cluster's CA is not "
            "migrated yet; migrate only a cluster with ozone.security.enabled=false"
        )
    meta = len(tables.get(META, {}))
    if meta:
        plan.skipped.append(Skipped(
            f"{META} ({', '.join(sorted(_text(k, META) for k in tables[META]))})", meta,
            "Ozone's finalization marks; its layout version comes from Ozone's VERSION (an unfinalized cluster "
            "stays unfinalized; an interrupted finalization is run again with `ozone admin scm finalizeupgrade`)",
        ))
    stateful = len(tables.get(STATEFUL_SERVICE_CONFIG, {}))
    if stateful:
        plan.skipped.append(Skipped(
            f"{STATEFUL_SERVICE_CONFIG} ({', '.join(sorted(_text(k, STATEFUL_SERVICE_CONFIG) for k in tables[STATEFUL_SERVICE_CONFIG]))})",
            stateful, "the records of Ozone's stateful services (the ContainerBalancer's configuration, the deleted-"
            "block log's summary): this SCM keeps its own; start the balancer again if it ran",
        ))
    return plan

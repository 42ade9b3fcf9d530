"""``ozone-scm migrate from-ozone``: this SCM's primordial member built from a stopped Ozone SCM's state.

The edge of the migration: it reads Ozone's ``scm.db`` (RocksDB, opened read-only through ``rocksdict``), its
VERSION file and its Ratis log segments, hands the bytes to the pure core (:mod:`scm_server.migrate.ozone_records`)
and writes this SCM's store the way ``scm --restore`` does: a one-member ring at Ozone's last applied (term, index)
with Ozone's clusterID and this member's scmUuid, the Raft term above Ozone's (datanodes drop commands of an older
term), VERSION written last so an interrupted migration is never started as a ring. The other members then join
with ``scm --bootstrap``.

It refuses, in one line each, and before writing anything: a directory that is not an Ozone SCM's scm.db; a DB whose
``LOCK`` an Ozone SCM still holds (a running SCM); anything answering on the Raft or client port of an SCM of the
configured ring (an Ozone SCM left running there); a Ratis log holding state-machine entries scm.db does not (Ozone
flushes its transaction buffer only on an interval or a snapshot, not when it stops); a target that already holds
SCM data; what cannot be carried over without loss (EC containers, a secure cluster's CA). Nothing under Ozone's
directories is written (the DB is read through a staged view of hard links: the binding leaves a file of its own in
the directory it opens).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scm_server import hdds_layout as layout
from scm_server.conf import OzoneConfiguration
from scm_server.exceptions import SCMError
from scm_server.ha.bootstrap import LocalSCM, resolve_local_scm
from scm_server.ha.recovery import RESTORE_TERM_MARGIN, answers, holds_data
from scm_server.metadata.scm_db_definition import TRANSACTION_INFO_KEY
from scm_server.metadata.scm_metadata_store import SCMMetadataStore, fsync_dir
from scm_server.metadata.storage_config import CLUSTER_ID_PREFIX, SCMStorageConfig
from scm_server.migrate import ozone_records as rec
from scm_server.proto import hdds_pb2
from scm_server.raft.core.recovery import RecoveryError, restored_start
from scm_server.raft.storage import LevelDBStorage

LOG = logging.getLogger(__name__)
FLUSH_HINT = (
    "restart that Ozone SCM with ozone.scm.ha.dbtransactionbuffer.flush.interval set to a few seconds, wait that "
    "long after its last write, stop it, and run the migration again"
)
_CLOSED_SEGMENT = re.compile(r"^log_(\d+)-(\d+)$")
_OPEN_SEGMENT = re.compile(r"^log_inprogress_(\d+)$")


class MigrationRefused(SCMError):
    """The migration must not run; the message says what is wrong and what to do."""


@dataclass(frozen=True)
class OzoneSources:
    """Where Ozone's SCM kept its state: ``scm.db``, its VERSION file, its Ratis storage directory."""

    db: Path
    version_file: Path
    ratis_dir: Path | None

    @classmethod
    def from_db(cls, db: Path, version_file: Path | None = None, ratis_dir: Path | None = None) -> OzoneSources:
        """Ozone's defaults beside the DB (``ozone.scm.db.dirs``): ``scm/current/VERSION`` and ``scm.ratis``."""
        parent = db.parent
        return cls(db, version_file or parent / "scm" / "current" / "VERSION",
                   ratis_dir if ratis_dir is not None else parent / "scm.ratis")


@dataclass(frozen=True)
class MigrationResult:
    cluster_id: str
    scm_id: str
    term: int
    index: int
    containers: int
    pipelines: int
    deleted_blocks: int
    sequence_ids: dict[str, int]


# ---- reading Ozone's state (read-only) ------------------------------------------------------------------------


def check_not_running(db: Path) -> None:
    """RocksDB holds an fcntl lock on ``<db>/LOCK`` while open: if we cannot take it, an Ozone SCM runs on it."""
    lock = db / "LOCK"
    if not lock.is_file():
        return
    try:
        fd = os.open(lock, os.O_RDONLY)  # a read lock conflicts with the writer's; works on a read-only mount too
    except OSError as exc:
        raise MigrationRefused(f"cannot open {lock} to check that no Ozone SCM runs on it: {exc}") from exc
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        raise MigrationRefused(
            f"{db} is in use (another process holds {lock}): stop the Ozone SCM on it first "
            "(`ozone --daemon stop scm` on every SCM of the ring) and run the migration again"
        ) from exc
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # RocksDB's files are immutable once written (the WAL is only read here)
    except OSError:
        shutil.copy2(src, dst)  # another file system


def _staged(db: Path, staging: Path) -> Path:
    """A view of ``db`` under ``staging``, file by file (hard links, copies across file systems), without its
    ``LOCK`` and logs: the binding writes a file of its own into the directory it opens, never into Ozone's."""
    view = staging / "scm.db"
    for path in sorted(db.rglob("*")):
        rel = path.relative_to(db)
        if path.is_dir():
            (view / rel).mkdir(parents=True, exist_ok=True)
        elif path.is_file() and rel.name != "LOCK" and not rel.name.startswith("LOG"):
            (view / rel).parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(path, view / rel)
    return view


def read_tables(db: Path) -> dict[str, dict[bytes, bytes]]:
    """Every column family of an Ozone scm.db, read-only: name -> raw key -> raw value."""
    if not db.is_dir():
        raise MigrationRefused(f"--ozone-db {db} is not a directory; give <ozone.scm.db.dirs>/scm.db of the Ozone SCM")
    if not (db / "CURRENT").is_file():
        raise MigrationRefused(f"--ozone-db {db} holds no RocksDB (no CURRENT file); give the Ozone SCM's scm.db")
    with tempfile.TemporaryDirectory(prefix="ozone-scm-migrate-") as staging:
        return _read_tables(_staged(db, Path(staging)), db)


def _read_tables(view: Path, db: Path) -> dict[str, dict[bytes, bytes]]:
    import rocksdict  # the binding loads RocksDB's shared library: only this command needs it

    try:
        names = rocksdict.Rdict.list_cf(str(view))
        opts = rocksdict.Options(raw_mode=True)
        handle = rocksdict.Rdict(
            str(view), options=opts, column_families={n: rocksdict.Options(raw_mode=True) for n in names},
            access_type=rocksdict.AccessType.read_only(),
        )
    except Exception as exc:  # rocksdict raises its own Exception subclasses, one per RocksDB status
        raise MigrationRefused(f"cannot open {db} read-only as a RocksDB: {exc}") from exc
    try:
        tables: dict[str, dict[bytes, bytes]] = {}
        for name in names:
            if name == "default":
                continue
            cf = handle.get_column_family(name)
            tables[name] = {_raw(k): _raw(v) for k, v in cf.items()}
        return tables
    finally:
        handle.close()


def _raw(value: object) -> bytes:
    if not isinstance(value, bytes):  # raw mode hands out bytes only
        raise MigrationRefused(f"rocksdict returned a {type(value).__name__} in raw mode")
    return value


def read_version(path: Path) -> rec.OzoneVersion:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise MigrationRefused(
            f"no Ozone VERSION file at {path}; give --ozone-version <ozone.scm.db.dirs>/scm/current/VERSION"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MigrationRefused(f"cannot read {path}: {exc}") from exc
    try:
        version = rec.decode_version(text, str(path))
    except rec.NotOzoneSCMData as exc:
        raise MigrationRefused(str(exc)) from exc
    if not 0 <= version.layout_version <= layout.SOFTWARE_LAYOUT_VERSION:
        raise MigrationRefused(
            f"{path}: layoutVersion={version.layout_version} is not an HDDS layout version this SCM knows "
            f"(0..{layout.SOFTWARE_LAYOUT_VERSION}, Ozone 2.2.0's); migrate from an Ozone release up to 2.2.0"
        )
    return version


def read_ratis_log(ratis_dir: Path, cluster_id: str, applied_index: int) -> list[rec.LogEntry]:
    """The entries of Ozone's Ratis log segments that may lie above ``applied_index`` (closed segments that end at
    or below it are not read). The group directory is the clusterID's UUID."""
    group = ratis_dir / cluster_id.removeprefix(CLUSTER_ID_PREFIX) / "current"
    if not group.is_dir():
        raise MigrationRefused(
            f"no Ratis log of cluster {cluster_id} under {ratis_dir} (looked for {group}); give --ozone-ratis-dir "
            "<ozone.scm.ha.ratis.storage.dir> so the migration can check that scm.db holds every applied entry"
        )
    entries: list[rec.LogEntry] = []
    for path in sorted(group.iterdir()):
        closed = _CLOSED_SEGMENT.match(path.name)
        if closed and int(closed.group(2)) <= applied_index:
            continue
        if closed or _OPEN_SEGMENT.match(path.name):
            try:
                entries += rec.decode_segment(path.read_bytes(), str(path))
            except rec.NotOzoneSCMData as exc:
                raise MigrationRefused(str(exc)) from exc
    return entries


def plan_from(sources: OzoneSources) -> rec.MigrationPlan:
    """Check and decode Ozone's state (writes nothing)."""
    check_not_running(sources.db)
    tables = read_tables(sources.db)
    version = read_version(sources.version_file)
    try:
        plan = rec.plan_migration(tables, version)
    except rec.NotOzoneSCMData as exc:
        raise MigrationRefused(f"{sources.db}: {exc}") from exc
    if sources.ratis_dir is not None:
        pending = rec.pending_entries(read_ratis_log(sources.ratis_dir, version.cluster_id, plan.index), plan.index)
        if pending:
            plan.refusals.append(
                f"the Ratis log holds {len(pending)} applied entr{'y' if len(pending) == 1 else 'ies'} scm.db does not "
                f"(scm.db is at index {plan.index}, the log reaches {pending[-1].index}): {FLUSH_HINT}"
            )
    return plan


# ---- writing this SCM's store ---------------------------------------------------------------------------------


def _ring_addresses(local: LocalSCM) -> list[tuple[str, str]]:
    """The Raft and client addresses of every SCM this configuration names: the Ozone SCMs ran there."""
    if local.node is None:
        return [(local.ratis_address, "this SCM's Raft port")]
    out = []
    for node in local.ha.nodes:
        out += [(node.ratis_address, f"{node.node_id}'s Raft port"), (node.client_address, f"{node.node_id}'s client port")]
    return out


def migrate_from_ozone(conf: OzoneConfiguration, sources: OzoneSources) -> MigrationResult:
    """Build this SCM (the primordial member of the new ring) from Ozone's state; see the module docstring."""
    plan = plan_from(sources)
    if plan.refusals:
        raise MigrationRefused(f"{sources.db}: {plan.refusals[0]}")
    local = resolve_local_scm(conf)
    if local.ha.primordial_node_id is not None and not local.is_primordial():
        raise MigrationRefused(
            f"this SCM ({local.node_id}) is not the primordial one (ozone.scm.primordial.node.id="
            f"{local.ha.primordial_node_id}): run the migration on that member, or set ozone.scm.primordial.node.id="
            f"{local.node_id} on every member of this ring, since the others join it with `scm --bootstrap`"
        )
    for address, what in _ring_addresses(local):
        if answers(address):
            raise MigrationRefused(
                f"something answers at {address} ({what}): stop every Ozone SCM of the ring, and start none of this "
                "ring's members, before migrating (a running Ozone SCM would go on handing out IDs above the "
                "ceilings being carried over)"
            )
    storage = SCMStorageConfig(local.scm.scm_db_dir)
    found = holds_data(local, storage)
    if found:
        raise MigrationRefused(
            f"this SCM's storage already holds data ({', '.join(found)}); a migration builds a new store and never "
            "overwrites one: point ozone.metadata.dirs (or --to) at an empty directory and run it again"
        )
    version = plan.version
    db_parent = local.scm.scm_db_dir
    staging = db_parent / f".migrate-{version.scm_id[:8]}"
    shutil.rmtree(staging, ignore_errors=True)  # only ever ours: a migration interrupted before its rename
    try:
        store = SCMMetadataStore(staging, create=True)
        try:
            batch = store.new_batch(sync=True)
            for c in plan.containers:
                store.containers.put_with_batch(batch, c.containerID, c)
            for p in plan.pipelines:
                store.pipelines.put_with_batch(batch, p.id.id, p)
            for t in plan.deleted_blocks:
                store.deleted_blocks.put_with_batch(batch, t.txID, t)
            for cid, pair in plan.moves:
                store.move.put_with_batch(batch, cid, pair)
            for name, last in plan.sequence_ids.items():
                store.sequence_id.put_with_batch(batch, name, hdds_pb2.SequenceIdProto(lastId=last))
            store.transaction_info.put_with_batch(
                batch, TRANSACTION_INFO_KEY, hdds_pb2.TransactionInfoProto(term=plan.term, index=plan.index)
            )
            batch.commit()
        finally:
            store.stop()
        (staging / "scm.db").replace(db_parent / "scm.db")
        fsync_dir(db_parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    try:
        hs, meta = restored_start(plan.index, plan.term, version.scm_id, local.ratis_address,
                                  plan.term + RESTORE_TERM_MARGIN)
    except RecoveryError as exc:
        raise MigrationRefused(f"{sources.db}: {exc}") from exc
    group_dir = local.raft_group_dir(version.cluster_id)
    group_dir.mkdir(parents=True, exist_ok=True)
    raft = LevelDBStorage(group_dir)
    try:
        raft.restore_at(hs, meta)
    finally:
        raft.close()
    local.snapshot_dir.mkdir(parents=True, exist_ok=True)
    # Ozone's layout version carries over: a cluster Ozone had not finalized stays unfinalized here (its admin
    # runs `ozone admin scm finalizeupgrade` when ready, as on Ozone's ring)
    storage.layout_version = version.layout_version
    # VERSION last: until it exists this SCM is not initialised, and a retry finds the data above and refuses
    storage.initialize(cluster_id=version.cluster_id, scm_id=version.scm_id, primary_scm_node_id=version.scm_id,
                       scm_ha=True)
    LOG.info("migrated Ozone SCM %s of cluster %s at (term %d, index %d): %s", version.scm_id, version.cluster_id,
             plan.term, plan.index, "; ".join(plan.summary_lines()[2:]))
    return MigrationResult(version.cluster_id, version.scm_id, plan.term, plan.index, len(plan.containers),
                           len(plan.pipelines), len(plan.deleted_blocks), dict(plan.sequence_ids))

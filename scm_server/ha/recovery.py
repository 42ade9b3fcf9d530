"""``ozone-scm scm --restore DIR`` and ``ozone-scm scm --recover``: disaster recovery of an SCM ring.

* :func:`scm_restore` creates a NEW one-member ring from a backup (``admin scm backup``), with the
  backup's cluster id (datanodes and OM keep working with it) and a new SCM id: it checks the
  backup offline, refuses a metadata directory that holds anything, unpacks the checkpoint, moves
  every ID sequence beyond what the old ring could have handed out (the rule in
  :func:`scm_server.metadata.backup.restored_last_ids`, docs/ha.md), starts the Raft log at the
  backup's (term, index) with this SCM alone (:func:`scm_server.raft.core.recovery.restored_start`)
  and writes VERSION last, so an interrupted restore is never started as a ring. Other members then
  join with ``scm --bootstrap`` as usual (they install the checkpoint from the new leader). A secure
  ring (:mod:`scm_server.security.restore`) keeps its root CA: the restore checks the root key and
  certificate (from a backup with ``--include-keys`` or given by flags) before writing anything, gives
  this SCM a new sub-CA under that root and revokes every SCM certificate of the old ring
  (cessationOfOperation) in the restored tables; what the old SCMs issued stays valid.
* :func:`scm_recover` turns a stopped survivor of a lost quorum into a one-member ring (etcd's
  ``--force-new-cluster``) through the Raft storage (:meth:`LevelDBStorage.force_new_cluster`): its
  log is kept whole, so nothing it holds is lost. It refuses while a majority of the old membership
  still answers on its Raft ports, unless forced. On a secure ring it leaves a note naming the
  removed members, whose SCM certificates the recovered SCM revokes through Raft once it leads.
"""

from __future__ import annotations

import logging
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from scm_server.conf import OzoneConfiguration, SCMHAConfig
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError, SCMError, StorageError
from scm_server.ha.bootstrap import LocalSCM, _hostname, _security_enabled, resolve_local_scm
from scm_server.ha.sequence_id_generator import INITIAL_VALUES
from scm_server.metadata.backup import BackupError, restored_last_ids, unpack_checkpoint, verify_backup
from scm_server.metadata.scm_metadata_store import SCMMetadataStore, fsync_dir
from scm_server.metadata.storage_config import SCMStorageConfig
from scm_server.proto import hdds_pb2
from scm_server.raft.core.recovery import RecoveryError, restored_start
from scm_server.raft.storage import LevelDBStorage
from scm_server.security import init as sec_init
from scm_server.security import restore as sec_restore
from scm_server.security.core import certificates as pki

LOG = logging.getLogger(__name__)

# The restored ring's Raft term starts this far above the backup's: datanodes drop commands stamped
# with a term older than the highest they have seen, and the old ring may have held elections after
# the backup (each election is one term).
RESTORE_TERM_MARGIN = 1000
REACH_TIMEOUT = 1.0


class RecoveryFailed(SCMError):
    """A restore or recovery that must not proceed; the message says what to do."""


@dataclass(frozen=True)
class RestoreResult:
    cluster_id: str
    scm_id: str
    term: int
    index: int
    sequence_ids: dict[str, int]
    retired_scm_certificates: tuple[str, ...] = ()


def holds_data(local: LocalSCM, storage: SCMStorageConfig) -> list[str]:
    found: list[str] = []
    if storage.is_initialized:
        found.append(f"VERSION ({storage.cluster_id})")
    db = local.scm.scm_db_dir / "scm.db"
    if db.exists():
        found.append(str(db))
    if local.ratis_dir.is_dir() and any(p for p in local.ratis_dir.rglob("*") if p.is_file()):
        found.append(str(local.ratis_dir))
    for keystore in (sec_init.sub_ca_dir(local.scm.metadata_dir), sec_init.root_ca_dir(local.scm.metadata_dir)):
        if keystore.is_dir() and any(p for p in keystore.rglob("*") if p.is_file()):
            found.append(str(keystore))  # an earlier SCM's keys: a secure restore would write its own there
    return found


def scm_restore(
    conf: OzoneConfiguration,
    backup: Path,
    *,
    cluster_id: str | None = None,
    now_ms: int | None = None,
    root_cert_file: Path | None = None,
    root_key_file: Path | None = None,
) -> RestoreResult:
    """Create a one-member ring on this SCM from ``backup`` (see the module docstring)."""
    local = resolve_local_scm(conf)
    security: SecurityConfig | None = None
    if _security_enabled(conf):
        try:
            security = SecurityConfig.from_conf(conf)
        except ConfigError as exc:
            raise RecoveryFailed(f"security: {exc}") from exc
    if (root_cert_file is None) != (root_key_file is None):
        raise RecoveryFailed("give both --root-ca-cert and --root-ca-key (the root CA certificate and its key), or neither")
    if root_cert_file is not None and security is None:
        raise RecoveryFailed("--root-ca-cert/--root-ca-key apply to a secure ring only (ozone.security.enabled=true)")
    try:
        manifest = verify_backup(backup, cluster_id)
    except BackupError as exc:
        raise RecoveryFailed(str(exc)) from exc
    storage = SCMStorageConfig(local.scm.scm_db_dir)
    found = holds_data(local, storage)
    if found:
        raise RecoveryFailed(
            f"this SCM's storage already holds data ({', '.join(found)}); a restore creates a new ring and "
            "never overwrites: move those directories aside (or point the configuration at empty ones) and "
            "run `scm --restore` again"
        )
    now = int(time.time() * 1000) if now_ms is None else now_ms
    scm_id = str(uuid.uuid4())
    db_parent = local.scm.scm_db_dir
    staging = db_parent / f".restore-{scm_id[:8]}"
    try:
        unpack_checkpoint(backup, staging)
        store = SCMMetadataStore(staging, create=False)
        try:
            trx = store.get_transaction_info()
            if trx is None or (trx.term, trx.index) != (manifest.term, manifest.index):
                got = "none" if trx is None else f"(term {trx.term}, index {trx.index})"
                raise RecoveryFailed(
                    f"backup {backup}: the checkpoint holds transaction info {got}, the manifest says (term "
                    f"{manifest.term}, index {manifest.index}); the backup is inconsistent, use another one"
                )
            stored = {name: int(v.lastId) for name, v in store.sequence_id.items()}
            if any(stored.get(k, v) != v for k, v in manifest.sequence_ids.items()):
                raise RecoveryFailed(
                    f"backup {backup}: the checkpoint's sequence ids {stored} differ from the manifest's "
                    f"{manifest.sequence_ids}; the backup is inconsistent, use another one"
                )
            base = {**INITIAL_VALUES, **stored}
            new_ids = restored_last_ids(base, manifest.created_ms, now, manifest.batch_size)
            retired: list[hdds_pb2.RevokedCertificateProto] = []
            plan: sec_restore.SecureRestorePlan | None = None
            if security is not None:
                scm_certs = [v for _, v in store.valid_scm_certs.items()]
                try:
                    plan = sec_restore.plan_secure_restore(
                        security, backup=backup, cluster_id=manifest.cluster_id, scm_certs=scm_certs,
                        root_cert_file=root_cert_file, root_key_file=root_key_file,
                        now=datetime.fromtimestamp(now / 1000, UTC),
                    )
                except sec_restore.SecureRestoreError as exc:
                    raise RecoveryFailed(str(exc)) from exc
                # CA mode operator: the sub-CA this SCM presents (the operator's to give) is not retired with the rest
                kept = {k for k, _ in store.revoked_certs.items()} | ({plan.operator_serial} - {""})
                retired = sec_restore.retired_scm_revocations(
                    scm_certs, kept, now_ms=now, by=f"restore by scm:{scm_id}")
            batch = store.new_batch(sync=True)
            for name, value in new_ids.items():
                store.sequence_id.put_with_batch(batch, name, hdds_pb2.SequenceIdProto(lastId=value))
            for record in retired:  # the old ring's SCMs are retired: none passes as an SCM of the new ring
                store.revoked_certs.put_with_batch(batch, record.serialId, record)
            batch.commit()
        finally:
            store.stop()
        (staging / "scm.db").replace(db_parent / "scm.db")
        fsync_dir(db_parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    try:
        hs, meta = restored_start(
            manifest.index, manifest.term, scm_id, local.ratis_address, manifest.term + RESTORE_TERM_MARGIN
        )
    except RecoveryError as exc:
        raise RecoveryFailed(f"backup {backup}: {exc}") from exc
    group_dir = local.raft_group_dir(manifest.cluster_id)
    group_dir.mkdir(parents=True, exist_ok=True)
    raft = LevelDBStorage(group_dir)
    try:
        raft.restore_at(hs, meta)
    finally:
        raft.close()
    local.snapshot_dir.mkdir(parents=True, exist_ok=True)
    if security is not None:
        assert plan is not None
        try:
            serial = sec_restore.install_secure_restore(
                security, plan, metadata_dir=local.scm.metadata_dir, cluster_id=manifest.cluster_id, scm_id=scm_id,
                hostname=_hostname(local), now=datetime.fromtimestamp(now / 1000, UTC),
            )
        except (SCMError, ValueError) as exc:
            raise RecoveryFailed(f"security: {exc}") from exc
        storage.set_scm_cert_serial_id(serial)
        LOG.info("restored the root CA %s; new sub-CA serial %s; retired %d SCM certificate(s) of the old ring",
                 pki.describe(plan.root), serial, len(retired))
    # VERSION last: until it exists this SCM is not initialised, and a retry finds the data above
    storage.initialize(cluster_id=manifest.cluster_id, scm_id=scm_id, primary_scm_node_id=scm_id, scm_ha=True)
    LOG.info(
        "restored cluster %s at (term %d, index %d) as a one-member ring, SCM id %s; sequence ids %s",
        manifest.cluster_id, manifest.term, manifest.index, scm_id, new_ids,
    )  # fmt: skip
    return RestoreResult(manifest.cluster_id, scm_id, manifest.term, manifest.index, new_ids,
                         tuple(r.serialId for r in retired))


# ---------------------------------------------------------------------------------------------
# scm --recover
# ---------------------------------------------------------------------------------------------


def answers(address: str, timeout: float = REACH_TIMEOUT) -> bool:
    """Does something accept connections on this member's Raft address?"""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class RecoverResult:
    scm_id: str
    removed: tuple[str, ...]
    last_index: int


def scm_recover(conf: OzoneConfiguration, *, force: bool = False) -> RecoverResult:
    """Rewrite this stopped SCM's Raft membership to itself alone (see the module docstring)."""
    local = resolve_local_scm(conf)
    storage = SCMStorageConfig(local.scm.scm_db_dir)
    if not storage.is_initialized or storage.cluster_id is None or storage.scm_id is None:
        raise RecoveryFailed(
            f"this SCM ({local.scm.scm_db_dir}) is not initialised: run `scm --recover` on a surviving member "
            "of the ring (`admin scm roles --recovery` names the most up-to-date one)"
        )
    group_dir = local.raft_group_dir(storage.cluster_id)
    if not group_dir.is_dir():
        raise RecoveryFailed(f"this SCM has no Raft log at {group_dir}: run `scm --recover` on a surviving member")
    try:
        raft = LevelDBStorage(group_dir)
    except StorageError as exc:
        raise RecoveryFailed(f"{exc} (stop this SCM before `scm --recover`)") from exc
    try:
        me = storage.scm_id
        cs = raft.conf_state()
        if me not in cs.voters:
            raise RecoveryFailed(
                f"this SCM ({me}) is not a voter of its stored configuration (voters {', '.join(cs.voters)}); "
                "run `scm --recover` on a surviving voter"
            )
        others = [p for p in cs.members() if p != me]
        if not others:
            raise RecoveryFailed(f"this SCM ({me}) is already the only member of its ring; just start it")
        reachable = [p for p in others if p in cs.voters and answers(cs.address_of(p))]
        majority = len(cs.voters) // 2 + 1
        if 1 + len(reachable) >= majority and not force:
            raise RecoveryFailed(
                f"{1 + len(reachable)} of {len(cs.voters)} members still answer (this SCM and "
                f"{', '.join(f'{p}@{cs.address_of(p)}' for p in reachable)}): a majority can still elect a "
                "leader, so restart the ring instead; pass --force only if those members must be abandoned"
            )
        removed_addresses = {p: cs.address_of(p) for p in others}
        after = raft.force_new_cluster(me)
        last = raft.last_index()
    finally:
        raft.close()
    if _security_enabled(conf):
        # the removed members' SCM certificates are revoked by this SCM once it leads (scm_server.ca.scm_security)
        by_address = {n.ratis_address: n.node_id for n in SCMHAConfig.from_conf(conf).nodes}
        node_ids = [by_address[a] for a in removed_addresses.values() if a in by_address]
        note = sec_init.note_retired_members(local.scm.metadata_dir, others, node_ids)
        LOG.info("secure ring: the SCM certificates of %s are revoked when this SCM leads (%s)", others, note)
    LOG.info("recovered: %s is now the only member (removed %s); log kept through index %d", me, others, last)
    assert after.voters == (me,)
    return RecoverResult(me, tuple(others), last)

"""SCM backups on disk: the manifest, its digests, the offline check, and the ID rule of a restore.

A backup directory (written by ``ozone-scm admin scm backup --out DIR``) holds:

* ``scm.db.tar.gz`` -- the leader's checkpoint of scm.db, the same gzip'd tar a joining member
  downloads (``InterSCMProtocolService.Download``), at one applied (term, index);
* ``keys/`` -- only with ``--include-keys``: the leader's CA private keys and certificates, every file
  created mode 0600 (the directory 0700) before a byte is written; never written otherwise;
* ``manifest.json`` -- format, cluster id, (term, index), the SCM membership, the leader's VERSION
  properties, the sequence-id ceilings (``sequenceId`` table) at that index, whether the ring was
  in safemode, the leader's wall-clock time of the backup, and sha256 + size of every other file;

:func:`verify_backup` re-checks everything offline; :func:`restored_last_ids` is the rule a
restore applies to the ID sequences (docs/ha.md, "IDs across a restore"). This module does no
network I/O and imports nothing above the metadata layer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scm_server.exceptions import StorageError
from scm_server.metadata.archive import extract_files

FORMAT = "ozone-scm-backup/1"
MANIFEST = "manifest.json"
CHECKPOINT_FILE = "scm.db.tar.gz"
KEYS_DIR = "keys"

# ---- the ID rule -----------------------------------------------------------------------------
# After a backup the old ring may go on handing out IDs; its Raft log is lost with it, so a
# restore only knows each sequence's persisted ceiling L (the lastId of the last allocated batch,
# the `sequenceId` table at the backup's index). The restored ring starts each sequence at
#     L + max(SAFETY_BATCHES * batch, RATE_PER_MS[name] * elapsed_ms)
# where elapsed_ms = restore wall-clock time - the backup's wall-clock time (never negative).
# Guarantee: no ID is handed out twice as long as the old ring, after the backup, handed out fewer
# than max(SAFETY_BATCHES batches, RATE_PER_MS * elapsed) IDs of that sequence, and the restoring
# host's clock is not behind the clock of the leader that took the backup.
SAFETY_BATCHES = 1000
DEFAULT_BATCH = 1000
# upper bounds of the sustained rate a ring can hand IDs out at (IDs per millisecond): localId
# follows Ozone's time-based scheme (milliseconds << 16: 65536 per ms); containers and deleted-block
# transactions each cost one Raft write, measured in the hundreds per second (docs/ha.md)
RATE_PER_MS: dict[str, int] = {
    "localId": 1 << 16,
    "containerId": 10,
    "delTxnId": 100,
    "CertificateId": 1,
}


def restored_last_ids(
    last_ids: dict[str, int], backup_ms: int, restore_ms: int, batch: int = DEFAULT_BATCH
) -> dict[str, int]:
    """The lastId each sequence starts from in a restored ring (pure)."""
    elapsed = max(0, restore_ms - backup_ms)
    out: dict[str, int] = {}
    for name, last in last_ids.items():
        rate = RATE_PER_MS.get(name, 1 << 16)
        out[name] = last + max(SAFETY_BATCHES * batch, rate * elapsed)
    return out


# ---- manifest ---------------------------------------------------------------------------------


class BackupError(StorageError):
    """A backup that cannot be used: the message says what is wrong and what to do."""


@dataclass(frozen=True)
class Manifest:
    raw: dict[str, Any]

    @property
    def cluster_id(self) -> str:
        return str(self.raw["clusterId"])

    @property
    def term(self) -> int:
        return int(self.raw["term"])

    @property
    def index(self) -> int:
        return int(self.raw["index"])

    @property
    def created_ms(self) -> int:
        return int(self.raw["createdMs"])

    @property
    def sequence_ids(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.raw.get("sequenceIds", {}).items()}

    @property
    def batch_size(self) -> int:
        return int(self.raw.get("sequenceBatchSize", DEFAULT_BATCH))

    @property
    def members(self) -> list[dict[str, str]]:
        return list(self.raw.get("members", []))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_out_dir(out: Path) -> None:
    """The output directory must be new or empty: a backup never overwrites anything."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BackupError(f"{out} already exists and is not empty; choose a new directory for the backup")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackupError(f"cannot create the backup directory {out}: {exc}") from exc


def write_private_file(path: Path, data: bytes) -> None:
    """A key file: created 0600 (its directory 0700) before any byte is written."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_backup(
    out: Path, checkpoint: bytes, info: dict[str, Any], created_ms: int, keys: dict[str, bytes] | None = None
) -> Manifest:
    """Write the checkpoint (and key files, 0600), then the manifest (last, so a directory without one
    is not a backup)."""
    ck = out / CHECKPOINT_FILE
    ck.write_bytes(checkpoint)
    _fsync(ck)
    for name, data in sorted((keys or {}).items()):
        if "/" in name or name.startswith("."):
            raise BackupError(f"refusing a key file named {name!r} from the SCM")
        write_private_file(out / KEYS_DIR / name, data)
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = path.relative_to(out).as_posix()
        files[rel] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    raw = {"format": FORMAT, **info, "createdMs": created_ms, "files": files, "includesPrivateKeys": bool(keys)}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
    _fsync(tmp)
    os.replace(tmp, out / MANIFEST)
    _fsync(out)
    return Manifest(raw)


def load_manifest(backup: Path) -> Manifest:
    path = backup / MANIFEST
    if not backup.is_dir():
        raise BackupError(f"{backup} is not a directory; give the directory `admin scm backup --out` wrote")
    if not path.is_file():
        raise BackupError(f"{backup} holds no {MANIFEST}: not a backup, or the backup did not finish; take a new one")
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{path} is unreadable or not JSON ({exc}): the backup is corrupt; take a new one") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        got = raw.get("format") if isinstance(raw, dict) else None
        raise BackupError(f"{path}: format {got!r} is not {FORMAT!r}; this is not a backup this version can read")
    for key in ("clusterId", "term", "index", "createdMs", "files", "sequenceIds", "members"):
        if key not in raw:
            raise BackupError(f"{path} lacks {key!r}: the backup is corrupt; take a new one")
    return Manifest(raw)


def verify_backup(backup: Path, cluster_id: str | None = None) -> Manifest:
    """Every file's size and sha256 against the manifest, the checkpoint unpacks, the cluster matches."""
    m = load_manifest(backup)
    if cluster_id is not None and m.cluster_id != cluster_id:
        raise BackupError(
            f"backup {backup} belongs to cluster {m.cluster_id}, not {cluster_id}; use a backup of this cluster"
        )
    files: dict[str, Any] = m.raw["files"]
    if CHECKPOINT_FILE not in files:
        raise BackupError(f"backup {backup}: the manifest lists no {CHECKPOINT_FILE}; the backup is corrupt")
    for rel, meta in sorted(files.items()):
        path = backup / rel
        if not path.is_file():
            raise BackupError(f"backup {backup}: {rel} is missing; the backup is incomplete, take a new one")
        size = path.stat().st_size
        if size != int(meta["size"]):
            raise BackupError(
                f"backup {backup}: {rel} is {size} bytes, the manifest says {meta['size']} (truncated?); "
                "the backup is corrupt, use another one"
            )
        if rel.startswith(KEYS_DIR + "/") and path.stat().st_mode & 0o077:
            raise BackupError(
                f"backup {backup}: {rel} is readable by others (mode {path.stat().st_mode & 0o777:o}); "
                f"`chmod 600 {path}` and keep the backup private"
            )
        digest = sha256_file(path)
        if digest != meta["sha256"]:
            raise BackupError(
                f"backup {backup}: sha256 of {rel} is {digest}, the manifest says {meta['sha256']}; "
                "the backup is corrupt, use another one"
            )
    try:
        with tarfile.open(backup / CHECKPOINT_FILE, "r:gz") as tar:
            names = tar.getnames()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupError(f"backup {backup}: {CHECKPOINT_FILE} cannot be read ({exc}); use another backup") from exc
    if not any(n == "scm.db" or n.startswith("scm.db/") for n in names):
        raise BackupError(f"backup {backup}: {CHECKPOINT_FILE} holds no scm.db; use another backup")
    return m


def backup_summary(m: Manifest) -> dict[str, Any]:
    """A backup in a few fields (what ``backup verify --status-file`` writes): cluster ID, term, index, when it was
    taken and its size in bytes (the files the manifest lists); for a secure ring the SHA-256 fingerprint of its
    root CA and whether the backup holds the root key."""
    out: dict[str, Any] = {
        "clusterID": m.cluster_id,
        "term": m.term,
        "index": m.index,
        "createdMs": m.created_ms,
        "sizeBytes": sum(int(f["size"]) for f in m.raw["files"].values()),
    }
    if m.raw.get("rootCAFingerprint"):
        # a secure ring: the root a restore keeps, and whether the backup holds its key (--include-keys)
        out["rootCAFingerprint"] = str(m.raw["rootCAFingerprint"])
        out["includesRootKey"] = f"{KEYS_DIR}/root-ca-private.pem" in m.raw["files"]
    return out


def delete_backup(backup: Path) -> bool:
    """Remove the backup directory ``backup``: only one that holds a backup manifest (or is empty: a backup that
    never started writing), never an arbitrary directory. Returns False when there was nothing to delete."""
    if not backup.exists():
        return False
    if backup.is_dir() and not any(backup.iterdir()):
        backup.rmdir()
        return True
    load_manifest(backup)  # raises (one line) unless it is a backup
    shutil.rmtree(backup)
    return True


def unpack_checkpoint(backup: Path, dest_parent: Path) -> Path:
    """Unpack the backup's scm.db under ``dest_parent`` (which must not hold one); returns its path."""
    target = dest_parent / "scm.db"
    if target.exists():
        raise BackupError(f"{target} already exists; refusing to overwrite it")
    dest_parent.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(backup / CHECKPOINT_FILE, "r:gz") as tar:
            extract_files(tar, dest_parent)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupError(f"backup {backup}: {CHECKPOINT_FILE} cannot be unpacked ({exc}); use another backup") from exc
    if not target.is_dir():
        raise BackupError(f"backup {backup}: {CHECKPOINT_FILE} did not unpack into an scm.db directory")
    return target

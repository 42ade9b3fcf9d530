"""SCMMetadataStore: opens scm.db (plyvel) and exposes one typed :class:`Table` per column family.

It is the edge between the SCM managers and LevelDB. Every plyvel error is wrapped in
:class:`~scm_server.exceptions.StorageError` naming the path and what to do.

Checkpoints (for HA snapshot install, Ozone's RocksDB checkpoint): :meth:`checkpoint` copies a
consistent view (a LevelDB snapshot iterator) into a fresh DB in a directory;
:meth:`replace_from_checkpoint` swaps a checkpoint in for the live DB, keeping a backup and
rolling back if the new DB cannot be opened.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import plyvel

from scm_server.exceptions import StorageError
from scm_server.metadata.scm_db_definition import (
    TRANSACTION_INFO_KEY,
    BatchOperation,
    SCMDBDefinition,
    Table,
)
from scm_server.proto import hdds_pb2

_CHECKPOINT_BATCH = 4096


def _open_db(path: Path, create: bool) -> plyvel.DB:
    try:
        return plyvel.DB(str(path), create_if_missing=create)
    except plyvel.IOError as exc:
        if "lock" in str(exc).lower():
            raise StorageError(
                f"scm.db at {path} is locked by another process ({exc}); stop the other SCM using it, "
                "or scan a checkpoint copy"
            ) from exc
        raise StorageError(f"cannot open scm.db at {path}: {exc}; check the directory exists and is writable") from exc
    except plyvel.Error as exc:
        raise StorageError(
            f"cannot open scm.db at {path}: {exc}; the DB may be corrupt, restore it from a checkpoint"
        ) from exc


def fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SCMMetadataStore:
    """scm.db with typed tables. ``db_dir`` is the parent directory (scm.db lives inside it)."""

    def __init__(self, db_dir: Path | str, *, create: bool = True, sync: bool = True) -> None:
        """``sync=False`` skips fsync on batch commits (tests and benchmarks only; a crash may lose
        the last writes, never tear a batch)."""
        self.db_dir = Path(db_dir)
        self.sync = sync
        self.db_path = self.db_dir / SCMDBDefinition.DB_NAME
        self._create = create
        self._db: plyvel.DB | None = None
        self.start()

    # ---- lifecycle ----
    def start(self) -> None:
        if self._db is not None:
            return
        if not self.db_dir.is_dir():
            if not self._create:
                raise StorageError(f"metadata directory {self.db_dir} does not exist; run `ozone-scm scm --init` first")
            try:
                self.db_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create metadata directory {self.db_dir}: {exc}") from exc
        self._db = _open_db(self.db_path, self._create)
        self._bind_tables(self._db)

    def _bind_tables(self, db: plyvel.DB) -> None:
        d = SCMDBDefinition
        self.containers = Table(db, d.CONTAINERS)
        self.pipelines = Table(db, d.PIPELINES)
        self.deleted_blocks = Table(db, d.DELETED_BLOCKS)
        self.sequence_id = Table(db, d.SEQUENCE_ID)
        self.transaction_info = Table(db, d.TRANSACTION_INFO)
        self.valid_certs = Table(db, d.VALID_CERTS)
        self.valid_scm_certs = Table(db, d.VALID_SCM_CERTS)
        self.revoked_certs = Table(db, d.REVOKED_CERTS)
        self.move = Table(db, d.MOVE)
        self.meta = Table(db, d.META)
        self.stateful_service_config = Table(db, d.STATEFUL_SERVICE_CONFIG)
        self.secret_keys = Table(db, d.SECRET_KEYS)

    def stop(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            finally:
                self._db = None

    close = stop

    @property
    def is_open(self) -> bool:
        return self._db is not None

    @property
    def db(self) -> plyvel.DB:
        if self._db is None:
            raise StorageError(f"scm.db at {self.db_path} is closed")
        return self._db

    def table(self, name: str) -> Table[Any, Any]:
        cf = SCMDBDefinition.by_name(name)
        return Table(self.db, cf)

    def tables(self) -> list[Table[Any, Any]]:
        return [Table(self.db, cf) for cf in SCMDBDefinition.column_families()]

    def new_batch(self, sync: bool | None = None) -> BatchOperation:
        return BatchOperation(self.db, sync=self.sync if sync is None else sync)

    def get_transaction_info(self) -> hdds_pb2.TransactionInfoProto | None:
        return self.transaction_info.get(TRANSACTION_INFO_KEY)

    # ---- checkpoints ----
    def checkpoint(self, dest_dir: Path | str) -> Path:
        """Write a consistent copy of scm.db into ``dest_dir/scm.db`` and return that path.

        Uses a LevelDB snapshot so writes that land during the copy are not included.
        """
        dest = Path(dest_dir) / SCMDBDefinition.DB_NAME
        if dest.exists():
            raise StorageError(f"checkpoint destination {dest} already exists; choose an empty directory")
        dest.parent.mkdir(parents=True, exist_ok=True)
        snapshot = self.db.snapshot()
        target = _open_db(dest, create=True)
        try:
            batch = target.write_batch(sync=False)
            for n, (k, v) in enumerate(snapshot.iterator(), start=1):
                batch.put(k, v)
                if n % _CHECKPOINT_BATCH == 0:
                    batch.write()
                    batch = target.write_batch(sync=False)
            batch.write()
            target.put(b"\x00checkpoint-complete", b"1", sync=True)
            target.delete(b"\x00checkpoint-complete", sync=True)
        except plyvel.Error as exc:
            raise StorageError(f"checkpoint of {self.db_path} into {dest} failed: {exc}") from exc
        finally:
            snapshot.close()
            target.close()
        return dest

    @staticmethod
    def read_transaction_info(checkpoint_db_path: Path | str) -> hdds_pb2.TransactionInfoProto | None:
        """Read #TRANSACTIONINFO from a (closed) checkpoint DB, to verify it before installing."""
        path = Path(checkpoint_db_path)
        if path.name != SCMDBDefinition.DB_NAME and (path / SCMDBDefinition.DB_NAME).is_dir():
            path = path / SCMDBDefinition.DB_NAME
        db = _open_db(path, create=False)
        try:
            return Table(db, SCMDBDefinition.TRANSACTION_INFO).get(TRANSACTION_INFO_KEY)
        finally:
            db.close()

    def replace_from_checkpoint(self, checkpoint_db_path: Path | str) -> Path:
        """Swap the live scm.db for a checkpoint; keep a backup; roll back if the new one fails to open.

        Returns the backup path (the caller removes it once the SCM has reloaded successfully).
        """
        src = Path(checkpoint_db_path)
        if src.name != SCMDBDefinition.DB_NAME and (src / SCMDBDefinition.DB_NAME).is_dir():
            src = src / SCMDBDefinition.DB_NAME
        if not src.is_dir():
            raise StorageError(f"checkpoint {src} is not a directory holding an scm.db")
        # Verify the checkpoint opens and decodes its transaction info before touching the live DB.
        self.read_transaction_info(src)
        self.stop()
        backup = self.db_dir / f"{SCMDBDefinition.DB_NAME}.backup"
        if backup.exists():
            shutil.rmtree(backup)
        moved_live = False
        try:
            if self.db_path.exists():
                os.replace(self.db_path, backup)
                moved_live = True
            if src.parent.resolve() == self.db_dir.resolve():
                os.replace(src, self.db_path)
            else:
                shutil.copytree(src, self.db_path)
            fsync_dir(self.db_dir)
            self.start()
        except (OSError, StorageError) as exc:
            # Roll back: put the previous DB back in place and reopen it.
            self._db = None
            if self.db_path.exists():
                shutil.rmtree(self.db_path, ignore_errors=True)
            if moved_live:
                os.replace(backup, self.db_path)
            self.start()
            raise StorageError(
                f"installing checkpoint {src} failed ({exc}); rolled back to the previous scm.db"
            ) from exc
        return backup

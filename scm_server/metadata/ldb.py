"""Backend of ``ozone-scm debug ldb``: list column families and scan one as JSON lines.

Ozone's ``ozone debug ldb --db=scm.db scan --column-family=containers`` is used to compare the
replicated tables of several SCMs. LevelDB allows one process per DB (a LOCK file), so if the
DB is held by a running SCM we scan a copy of its files taken into a temporary directory; for
a stopped SCM the DB is opened in place and never written (no create, no writes). A LevelDB that is
not an scm.db (a Raft log, an empty DB elsewhere) is refused instead of listed as empty tables.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import plyvel

from scm_server.exceptions import StorageError
from scm_server.metadata.codecs import json_line
from scm_server.metadata.scm_db_definition import SCMDBDefinition, Table


def _resolve(db_path: Path | str) -> Path:
    path = Path(db_path)
    if path.name != SCMDBDefinition.DB_NAME and (path / SCMDBDefinition.DB_NAME).is_dir():
        path = path / SCMDBDefinition.DB_NAME
    if not (path / "CURRENT").exists():
        raise StorageError(f"{path} is not a LevelDB database (no CURRENT file); pass --db=<dir>/scm.db")
    return path


# Keys an scm.db may hold outside the column families (a finished checkpoint's marker).
_MARKER_KEYS = (b"\x00checkpoint-complete",)


def foreign_key(db: plyvel.DB) -> bytes | None:
    """A key that belongs to no column family of scm.db (None if every key does).

    LevelDB keeps keys sorted, so it is enough to look into the gaps between the column-family
    prefixes: one seek per gap, whatever the size of the DB."""
    prefixes = sorted(cf.prefix for cf in SCMDBDefinition.column_families())
    gaps: list[tuple[bytes | None, bytes | None]] = [(None, prefixes[0])]
    for here, after in zip(prefixes, [*prefixes[1:], None], strict=True):
        end = here[:-1] + bytes([here[-1] + 1])  # first key past every key starting with `here`
        gaps.append((end, after))
    for start, stop in gaps:
        for key in db.iterator(start=start, stop=stop, include_value=False):
            if key not in _MARKER_KEYS:
                return bytes(key)
    return None


def _check_is_scm_db(db: plyvel.DB, path: Path) -> None:
    stray = foreign_key(db)
    if stray is not None:
        raise StorageError(
            f"{path} is a LevelDB database but not an SCM DB (key {stray[:40]!r} belongs to no scm.db table; "
            f"a Raft log?); pass --db=<ozone.metadata.dirs>/{SCMDBDefinition.DB_NAME}"
        )
    if path.name != SCMDBDefinition.DB_NAME and next(db.iterator(include_value=False), None) is None:
        raise StorageError(
            f"{path} is an empty LevelDB database, not an SCM DB; pass --db=<ozone.metadata.dirs>/"
            f"{SCMDBDefinition.DB_NAME}"
        )


@contextmanager
def open_read_only(db_path: Path | str) -> Iterator[plyvel.DB]:
    """Open an existing scm.db without creating or writing it; copy it first if it is locked."""
    path = _resolve(db_path)
    tmp: str | None = None
    try:
        try:
            db = plyvel.DB(str(path), create_if_missing=False)
        except plyvel.IOError as exc:
            if "lock" not in str(exc).lower():
                raise StorageError(f"cannot open {path}: {exc}") from exc
            tmp = tempfile.mkdtemp(prefix="ldb-scan-")
            copy = Path(tmp) / SCMDBDefinition.DB_NAME
            shutil.copytree(path, copy, ignore=shutil.ignore_patterns("LOCK"))
            db = plyvel.DB(str(copy), create_if_missing=False)
        except plyvel.Error as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        try:
            _check_is_scm_db(db, path)
            yield db
        finally:
            db.close()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def list_column_families(db_path: Path | str) -> list[dict[str, Any]]:
    """Every column family of the schema with its key/value codec and entry count."""
    with open_read_only(db_path) as db:
        return [
            {
                "name": cf.name,
                "key": cf.key_codec.name,
                "value": cf.value_codec.name,
                "count": Table(db, cf).count(),
                "description": cf.description,
            }
            for cf in SCMDBDefinition.column_families()
        ]


def scan(db_path: Path | str, column_family: str, limit: int | None = None, with_keys: bool = True) -> Iterator[str]:
    """Yield one JSON document per entry of ``column_family``, in key order."""
    cf = SCMDBDefinition.by_name(column_family)
    with open_read_only(db_path) as db:
        for n, (key, value) in enumerate(Table(db, cf).items()):
            if limit is not None and n >= limit:
                return
            jkey = cf.key_codec.to_json(key)
            jvalue = cf.value_codec.to_json(value)
            yield json_line(jkey, jvalue) if with_keys else json_line(None, jvalue)

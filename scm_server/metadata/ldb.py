"""Backend of ``ozone-scm debug ldb``: list column families and scan one as JSON lines.

Ozone's ``ozone debug ldb --db=scm.db scan --column-family=containers`` is used to compare the
replicated tables of several SCMs. LevelDB allows one process per DB (a LOCK file), so if the
DB is held by a running SCM we scan a copy of its files taken into a temporary directory; for
a stopped SCM the DB is opened in place and never written (no create, no writes).
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

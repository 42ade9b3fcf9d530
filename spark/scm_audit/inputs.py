"""Find and validate the export directories an audit reads, before any JVM starts.

``--input DIR`` is either one export (``DIR/manifest.json``) or the output of
``export --all-scms`` (``DIR/<scm>/manifest.json`` per SCM). Every problem becomes an
:class:`AuditError` whose one line names the directory, what is wrong and what to do:

* nothing there (empty directory, no manifest anywhere);
* a manifest that is not JSON, of another format or an unknown format version;
* a table file missing, or truncated (its size differs from the manifest, or it does not start
  and end with Parquet's ``PAR1`` magic);
* exports from different clusters, or two exports of the same SCM.

Row-level identity (each file's ``scm_id``/``cluster_id``/``applied_index`` columns, row counts) is
checked by the job itself, in the same pass that reads the data. Plain Python: no pyspark here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from scm_audit.errors import AuditError
from scm_server import audit_format as fmt

PARQUET_MAGIC = b"PAR1"


@dataclasses.dataclass(frozen=True)
class Export:
    path: Path
    manifest: fmt.ExportManifest

    @property
    def label(self) -> str:
        return self.manifest.label

    def file(self, table: str) -> Path:
        return self.path / self.manifest.tables[table].file


@dataclasses.dataclass(frozen=True)
class ExportSet:
    root: Path
    exports: tuple[Export, ...]

    @property
    def cluster_id(self) -> str:
        return self.exports[0].manifest.cluster_id

    @property
    def same_index(self) -> bool:
        return len({e.manifest.applied_index for e in self.exports}) == 1

    @property
    def consistency(self) -> str:
        kinds = {e.manifest.consistency for e in self.exports}
        barriers = {e.manifest.barrier_id for e in self.exports}
        if kinds == {"barrier"} and len(barriers) == 1:
            return "barrier"
        return "local" if len(self.exports) == 1 else "independent"

    @property
    def primary(self) -> Export:
        """The export whose view the report leads with: the leader's, else the first by label."""
        leaders = [e for e in self.exports if e.manifest.is_leader]
        return (leaders or list(self.exports))[0]


def _check_file(export_dir: Path, table: str, entry: fmt.TableEntry) -> None:
    path = export_dir / entry.file
    if not path.is_file():
        raise AuditError(f"{export_dir}: {entry.file} is missing; the export is incomplete, export again")
    size = path.stat().st_size
    if size != entry.bytes:
        raise AuditError(
            f"{export_dir}: {entry.file} is {size} bytes but the manifest says {entry.bytes}: "
            "the file is truncated or was replaced; export again"
        )
    if size < 2 * len(PARQUET_MAGIC):
        raise AuditError(f"{export_dir}: {entry.file} is too short to be Parquet; export again")
    with open(path, "rb") as fh:
        head = fh.read(len(PARQUET_MAGIC))
        fh.seek(-len(PARQUET_MAGIC), 2)
        tail = fh.read(len(PARQUET_MAGIC))
    if head != PARQUET_MAGIC or tail != PARQUET_MAGIC:
        raise AuditError(f"{export_dir}: {entry.file} is not a complete Parquet file (truncated?); export again")


def load_export(export_dir: Path) -> Export:
    manifest_path = export_dir / fmt.MANIFEST
    try:
        text = manifest_path.read_text()
    except OSError as exc:
        raise AuditError(f"{export_dir}: cannot read {fmt.MANIFEST}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AuditError(
            f"{manifest_path} is not valid JSON ({exc.msg} at line {exc.lineno}): the export is truncated or "
            "corrupt; export again"
        ) from exc
    try:
        manifest = fmt.parse_manifest(data, str(export_dir))
    except fmt.ExportFormatError as exc:
        raise AuditError(str(exc)) from exc
    for table, entry in manifest.tables.items():
        _check_file(export_dir, table, entry)
    return Export(export_dir, manifest)


def discover(root: Path) -> ExportSet:
    """Validate ``root`` (one export, or one per subdirectory) and return the set."""
    if not root.exists():
        raise AuditError(f"input {root} does not exist; pass the --out directory of `ozone-scm admin audit export`")
    if not root.is_dir():
        raise AuditError(f"input {root} is not a directory; pass the --out directory of `ozone-scm admin audit export`")
    if (root / fmt.MANIFEST).exists():
        exports = [load_export(root)]
    else:
        dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
        candidates = [d for d in dirs if (d / fmt.MANIFEST).exists()]
        if not candidates:
            what = "is empty" if not any(root.iterdir()) else "holds no manifest.json (nor do its subdirectories)"
            raise AuditError(
                f"input {root} {what}: it is not an audit export; run `ozone-scm admin audit export --out {root}` first"
            )
        exports = [load_export(d) for d in candidates]
    clusters = {e.manifest.cluster_id for e in exports}
    if len(clusters) > 1:
        listing = ", ".join(f"{e.label}={e.manifest.cluster_id}" for e in exports)
        raise AuditError(f"input {root} mixes exports of different clusters ({listing}); audit one cluster at a time")
    seen: dict[str, Path] = {}
    for e in exports:
        if e.manifest.scm_id in seen:
            raise AuditError(
                f"input {root} holds two exports of SCM {e.manifest.scm_id} ({seen[e.manifest.scm_id]} and {e.path}); "
                "keep one export per SCM"
            )
        seen[e.manifest.scm_id] = e.path
    exports.sort(key=lambda e: (not e.manifest.is_leader, e.label))
    return ExportSet(root, tuple(exports))

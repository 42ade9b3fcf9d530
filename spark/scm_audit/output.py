"""The report directory: one subdirectory per run, trends from past runs, atomic publishing.

    OUT/report.html        the latest report (self-contained HTML)
    OUT/summary.json       the latest summary
    OUT/latest -> runs/ID  the latest run (its findings are OUT/latest/findings/*.parquet)
    OUT/runs/ID/           report.html, summary.json, findings/ of one run
    OUT/history/ID.json    a small trend record per run (kept longer than the runs)

A run is written into ``OUT/.staging-ID`` and becomes visible only by renaming that directory to
``OUT/runs/ID``; ``report.html``/``summary.json``/``latest`` are then replaced with ``os.replace``
(atomic per file). A run that fails leaves only its staging directory, which is removed: the
previous report is never overwritten by a partial one. Plain Python (no pyspark).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from scm_audit.errors import AuditError

REPORT = "report.html"
SUMMARY = "summary.json"
FINDINGS_DIR = "findings"
RUNS = "runs"
HISTORY = "history"
LATEST = "latest"
DEFAULT_KEEP_RUNS = 20
MAX_HISTORY = 366


def new_run_id(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


def _nearest_existing(out: Path) -> Path:
    existing = out
    while not existing.exists() and not existing.is_symlink() and existing != existing.parent:
        existing = existing.parent
    return existing


def check_out_dir(out: Path) -> None:
    """The report directory may be new, empty, or one of ours (it holds runs/ or history/). A new one
    must be creatable: its nearest existing ancestor is a directory this process can write in."""
    if not out.exists():
        existing = _nearest_existing(out)
        if not existing.is_dir():
            raise AuditError(
                f"--out {out}: {existing} is a file, not a directory, so no report can be written under it; "
                "choose an --out path whose parents are directories"
            )
        probe = existing / f".scm-audit-probe-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            raise AuditError(
                f"--out {out}: cannot create it in {existing}: {exc.strerror or exc}; choose a directory you can write to"
            ) from exc
        return
    if not out.is_dir():
        raise AuditError(f"--out {out} exists and is not a directory; choose a report directory")
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    if names and not names & {RUNS, HISTORY, REPORT}:
        raise AuditError(f"--out {out} is not empty and holds no previous audit report; choose an empty or new directory")


def make_out_dir(out: Path) -> list[Path]:
    """Create ``out`` and its missing parents; returns the directories created (outermost first) so
    that a failed run can remove them again (:func:`remove_created`)."""
    check_out_dir(out)
    missing: list[Path] = []
    existing = out
    while not existing.exists() and not existing.is_symlink():
        missing.append(existing)
        existing = existing.parent
    created: list[Path] = []
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except OSError as exc:
            remove_created(created)
            raise AuditError(
                f"--out {out}: cannot create directory {directory}: {exc.strerror or exc}; choose a directory you can write to"
            ) from exc
        created.append(directory)
    return created


def remove_created(created: list[Path]) -> None:
    """Remove directories a failed run created (innermost first), only while empty: never anything
    that existed before the run."""
    for directory in reversed(created):
        try:
            directory.rmdir()
        except OSError:
            return


def staging_dir(out: Path, run_id: str) -> Path:
    check_out_dir(out)
    path = out / f".staging-{run_id}"
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        raise AuditError(f"--out {out}: cannot write in it: {exc.strerror or exc}; choose a directory you can write to") from exc
    return path


def discard_staging(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(3)}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(out: Path, run_id: str, staging: Path, summary: dict[str, Any], keep_runs: int = DEFAULT_KEEP_RUNS) -> Path:
    """Make the staged run the latest one. Returns ``OUT/runs/ID``."""
    from scm_audit.report import trend_point  # local: report imports nothing from here

    runs = out / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    final = runs / run_id
    os.replace(staging, final)
    _fsync_dir(runs)
    history = out / HISTORY
    history.mkdir(exist_ok=True)
    write_text(history / f"{run_id}.json", json.dumps(trend_point(summary), sort_keys=True))
    for name in (SUMMARY, REPORT):
        tmp = out / f".{name}.tmp-{secrets.token_hex(3)}"
        shutil.copyfile(final / name, tmp)
        os.replace(tmp, out / name)
    link_tmp = out / f".{LATEST}.tmp-{secrets.token_hex(3)}"
    os.symlink(Path(RUNS) / run_id, link_tmp)
    os.replace(link_tmp, out / LATEST)
    _fsync_dir(out)
    prune(out, keep_runs)
    return final


def prune(out: Path, keep_runs: int) -> None:
    runs = sorted((p for p in (out / RUNS).iterdir() if p.is_dir()), key=lambda p: p.name)
    for old in runs[: max(0, len(runs) - max(keep_runs, 1))]:
        shutil.rmtree(old, ignore_errors=True)
    records = sorted((out / HISTORY).glob("*.json"))
    for old in records[: max(0, len(records) - MAX_HISTORY)]:
        old.unlink(missing_ok=True)


def load_history(out: Path) -> list[dict[str, Any]]:
    """Trend records of past runs, oldest first (unreadable records are skipped)."""
    records = []
    for path in sorted((out / HISTORY).glob("*.json")) if (out / HISTORY).is_dir() else []:
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return records

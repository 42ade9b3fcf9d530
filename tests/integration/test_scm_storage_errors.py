"""The daemon refuses to start on bad storage, says why, exits non-zero, and modifies nothing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scm_harness import LocalCluster

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow


def _snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Path -> (content hash, mtime_ns) of everything under root (dirs hash to '')."""
    out: dict[str, tuple[str, int]] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
            out[str(p.relative_to(root))] = (digest, p.stat().st_mtime_ns)
    return out


def _start_scm(conf_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scm_server.cli.main", "--conf", str(conf_dir), "scm"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_corrupt_version_file(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 1)
    cluster.write_configs()
    cluster.init()
    scm = cluster.scms[0]
    version = scm.metadata_dir / "scm" / "current" / "VERSION"
    assert version.exists()
    text = version.read_text()
    version.write_text(
        "\n".join(
            "clusterID=not-a-cluster-id" if line.startswith("clusterID=") else line
            for line in text.splitlines()
        )
        + "\n"
    )
    before = _snapshot(scm.metadata_dir)
    result = _start_scm(scm.conf_dir)
    assert result.returncode != 0
    assert "VERSION" in result.stderr and "clusterID" in result.stderr
    assert "Traceback" not in result.stderr
    assert _snapshot(scm.metadata_dir) == before


def test_missing_metadata_dir(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 1)
    cluster.write_configs(create_metadata_dirs=False)
    scm = cluster.scms[0]
    assert not scm.metadata_dir.exists()
    result = _start_scm(scm.conf_dir)
    assert result.returncode != 0
    assert "SCM not initialized: run `ozone-scm scm --init` first" in result.stderr
    assert str(scm.metadata_dir) in result.stderr
    assert not scm.metadata_dir.exists()


def test_uninitialised_dir(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 1)
    cluster.write_configs()
    scm = cluster.scms[0]
    result = _start_scm(scm.conf_dir)
    assert result.returncode != 0
    assert "SCM not initialized: run `ozone-scm scm --init` first" in result.stderr
    assert list(scm.metadata_dir.iterdir()) == []

"""The backup directory format: manifest and digests, the offline check, and the restore's ID rule."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from scm_server.metadata.backup import (
    CHECKPOINT_FILE,
    MANIFEST,
    RATE_PER_MS,
    SAFETY_BATCHES,
    BackupError,
    backup_summary,
    prepare_out_dir,
    restored_last_ids,
    verify_backup,
    write_backup,
    write_private_file,
)

CID = "CID-8c5a3c3e-5b0e-4a47-9d39-8f0f7e3c1a11"


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"leveldb bytes"
        info = tarfile.TarInfo("scm.db/000001.ldb")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _backup(tmp_path: Path) -> Path:
    out = tmp_path / "b"
    prepare_out_dir(out)
    info = {"clusterId": CID, "term": 3, "index": 41, "members": [], "sequenceIds": {"localId": 5000}}
    write_backup(out, _tar(), info, created_ms=1000)
    return out


def test_written_backup_verifies(tmp_path: Path) -> None:
    out = _backup(tmp_path)
    m = verify_backup(out, CID)
    assert (m.cluster_id, m.term, m.index) == (CID, 3, 41)
    assert set(m.raw["files"]) == {CHECKPOINT_FILE}


def test_other_cluster_refused(tmp_path: Path) -> None:
    out = _backup(tmp_path)
    with pytest.raises(BackupError, match="belongs to cluster"):
        verify_backup(out, "CID-00000000-0000-0000-0000-000000000000")


def test_truncated_and_corrupt_refused(tmp_path: Path) -> None:
    out = _backup(tmp_path)
    data = (out / CHECKPOINT_FILE).read_bytes()
    (out / CHECKPOINT_FILE).write_bytes(data[:-10])
    with pytest.raises(BackupError, match="truncated"):
        verify_backup(out)
    flipped = bytearray(data)
    flipped[20] ^= 0xFF
    (out / CHECKPOINT_FILE).write_bytes(bytes(flipped))
    with pytest.raises(BackupError, match="sha256"):
        verify_backup(out)


def test_missing_manifest_and_wrong_format(tmp_path: Path) -> None:
    out = _backup(tmp_path)
    raw = json.loads((out / MANIFEST).read_text())
    raw["format"] = "something-else"
    (out / MANIFEST).write_text(json.dumps(raw))
    with pytest.raises(BackupError, match="format"):
        verify_backup(out)
    (out / MANIFEST).unlink()
    with pytest.raises(BackupError, match="holds no manifest"):
        verify_backup(out)


def test_out_dir_never_overwritten(tmp_path: Path) -> None:
    out = _backup(tmp_path)
    before = (out / CHECKPOINT_FILE).read_bytes()
    with pytest.raises(BackupError, match="not empty"):
        prepare_out_dir(out)
    assert (out / CHECKPOINT_FILE).read_bytes() == before


def test_key_files_are_0600_and_checked(tmp_path: Path) -> None:
    out = tmp_path / "k"
    prepare_out_dir(out)
    info = {"clusterId": CID, "term": 3, "index": 41, "members": [], "sequenceIds": {}}
    m = write_backup(out, _tar(), info, created_ms=1000, keys={"sub-ca-private.pem": b"-----BEGIN PRIVATE KEY-----"})
    key = out / "keys" / "sub-ca-private.pem"
    assert key.stat().st_mode & 0o777 == 0o600 and (out / "keys").stat().st_mode & 0o777 == 0o700
    assert m.raw["includesPrivateKeys"] is True and "keys/sub-ca-private.pem" in m.raw["files"]
    verify_backup(out)
    key.chmod(0o644)
    with pytest.raises(BackupError, match="readable by others"):
        verify_backup(out)
    bad = tmp_path / "x"
    prepare_out_dir(bad)
    with pytest.raises(BackupError, match="refusing a key file"):
        write_backup(bad, _tar(), info, 1, keys={"sub/evil.pem": b""})
    assert not (bad / "keys").exists()


def test_private_file_helper(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "ca.key"
    write_private_file(path, b"secret")
    assert path.stat().st_mode & 0o777 == 0o600


def test_id_rule() -> None:
    last = {"localId": 10_000, "containerId": 7}
    # no time passed: the safety margin of SAFETY_BATCHES batches
    assert restored_last_ids(last, 5000, 5000, 1000) == {
        "localId": 10_000 + SAFETY_BATCHES * 1000,
        "containerId": 7 + SAFETY_BATCHES * 1000,
    }
    # an hour later: the rate bound dominates for block ids
    hour = 3_600_000
    got = restored_last_ids(last, 0, hour, 1000)
    assert got["localId"] == 10_000 + RATE_PER_MS["localId"] * hour
    assert got["containerId"] == 7 + max(SAFETY_BATCHES * 1000, RATE_PER_MS["containerId"] * hour)
    # a restoring clock behind the backup's never lowers the margin below the batches
    assert restored_last_ids(last, hour, 0, 1000) == restored_last_ids(last, 0, 0, 1000)


def test_verify_writes_a_status_file_and_delete_removes_only_backups(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from scm_server.cli.main import cli

    out = _backup(tmp_path)
    status = tmp_path / "status.json"
    runner = CliRunner()
    res = runner.invoke(cli, ["admin", "scm", "backup", "verify", str(out), "--clusterid", CID,
                              "--status-file", str(status)])
    assert res.exit_code == 0, res.output
    summary = json.loads(status.read_text())
    assert summary == {"clusterID": CID, "term": 3, "index": 41, "createdMs": 1000,
                       "sizeBytes": (out / CHECKPOINT_FILE).stat().st_size}
    # a directory that is not a backup is refused in one line, and kept
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious").write_text("x")
    res = runner.invoke(cli, ["admin", "scm", "backup", "delete", str(other)])
    assert res.exit_code != 0 and "nothing was deleted" in res.output and len(res.output.strip().splitlines()) == 1
    assert (other / "precious").exists()
    res = runner.invoke(cli, ["admin", "scm", "backup", "delete", str(out)])
    assert res.exit_code == 0 and not out.exists()
    res = runner.invoke(cli, ["admin", "scm", "backup", "delete", str(out)])
    assert res.exit_code == 0 and "nothing to delete" in res.output


def test_the_summary_of_a_secure_backup_names_its_root_ca_and_whether_it_holds_the_root_key(tmp_path: Path) -> None:
    assert "rootCAFingerprint" not in backup_summary(verify_backup(_backup(tmp_path), CID))
    info = {"clusterId": CID, "term": 3, "index": 41, "members": [], "sequenceIds": {"localId": 5000},
            "rootCAFingerprint": "ab" * 32}
    plain_keys = tmp_path / "k1"
    prepare_out_dir(plain_keys)
    write_backup(plain_keys, _tar(), info, created_ms=1000, keys={"sub-ca-private.pem": b"k"})
    summary = backup_summary(verify_backup(plain_keys, CID))
    assert summary["rootCAFingerprint"] == "ab" * 32 and summary["includesRootKey"] is False
    with_root = tmp_path / "k2"
    prepare_out_dir(with_root)
    write_backup(with_root, _tar(), info, created_ms=1000, keys={"root-ca-private.pem": b"k", "sub-ca-private.pem": b"k"})
    assert backup_summary(verify_backup(with_root, CID))["includesRootKey"] is True

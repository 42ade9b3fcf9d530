"""The VERSION file: format, atomic write, validation errors naming file, field and fix."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from scm_server.exceptions import StorageError
from scm_server.metadata import SCMStorageConfig, StorageState, validate_cluster_id
from scm_server.metadata.storage_config import parse_properties

SCM_ID = "2f1e0c3a-1111-2222-3333-444455556666"
CID = "CID-8c0f0000-aaaa-bbbb-cccc-dddddddddddd"


def test_initialize_writes_ozone_format(tmp_path: Path) -> None:
    cfg = SCMStorageConfig(tmp_path)
    assert cfg.state is StorageState.NOT_INITIALIZED
    cfg.initialize(cluster_id=CID, scm_id=SCM_ID, primary_scm_node_id=SCM_ID, scm_ha=True,
                   now=datetime(2026, 11, 22, 1, 2, 3, tzinfo=UTC))
    path = tmp_path / "scm" / "current" / "VERSION"
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0] == "#Sun Nov 22 01:02:03 UTC 2026"
    props = parse_properties(text)
    assert props == {
        "clusterID": CID,
        "cTime": str(int(datetime(2026, 11, 22, 1, 2, 3, tzinfo=UTC).timestamp() * 1000)),
        "layoutVersion": "10",  # Ozone 2.2.0's newest HDDS layout feature
        "nodeType": "SCM",
        "primaryScmNodeId": SCM_ID,
        "scmHA": "true",
        "scmUuid": SCM_ID,
    }
    assert not (path.parent / "VERSION.tmp").exists()
    again = SCMStorageConfig(tmp_path)
    assert again.is_initialized and again.cluster_id == CID and again.scm_id == SCM_ID and again.scm_ha
    assert again.raft_group_id == CID[4:]


def test_initialize_generates_ids_and_keeps_them(tmp_path: Path) -> None:
    cfg = SCMStorageConfig(tmp_path)
    cfg.initialize()
    assert cfg.cluster_id is not None and cfg.cluster_id.startswith("CID-")
    first = (cfg.cluster_id, cfg.scm_id, cfg.c_time)
    cfg.set_scm_cert_serial_id("2")
    cfg.initialize(scm_ha=True)  # rewrite keeps ids
    reread = SCMStorageConfig(tmp_path)
    assert (reread.cluster_id, reread.scm_id, reread.c_time) == first
    assert reread.scm_cert_serial_id == "2" and reread.scm_ha


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda t: t.replace("clusterID=", "#clusterID="), "clusterID"),
        (lambda t: t.replace(CID, "not-a-cluster"), "clusterID"),
        (lambda t: t.replace("nodeType=SCM", "nodeType=OM"), "nodeType"),
        (lambda t: t.replace("scmUuid=" + SCM_ID, "scmUuid=xyz"), "scmUuid"),
        (lambda t: t.replace("layoutVersion=1", "layoutVersion=one"), "layoutVersion"),
        (lambda t: t.replace("scmHA=false", "scmHA=perhaps"), "scmHA"),
        (lambda t: "\n".join(x for x in t.splitlines() if not x.startswith("cTime")), "cTime"),
    ],
)
def test_corrupt_version_names_file_field_and_fix(tmp_path: Path, mutate, field: str) -> None:  # type: ignore[no-untyped-def]
    cfg = SCMStorageConfig(tmp_path)
    cfg.initialize(cluster_id=CID, scm_id=SCM_ID)
    path = cfg.version_file
    original = path.read_text()
    path.write_text(mutate(original))
    with pytest.raises(StorageError) as err:
        SCMStorageConfig(tmp_path)
    msg = str(err.value)
    assert str(path) in msg and repr(field) in msg
    assert "ozone-scm scm --init" in msg


def test_garbage_version_file(tmp_path: Path) -> None:
    cfg = SCMStorageConfig(tmp_path)
    cfg.initialize(cluster_id=CID, scm_id=SCM_ID)
    cfg.version_file.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(StorageError, match="VERSION"):
        SCMStorageConfig(tmp_path)


def test_missing_version_load_explains(tmp_path: Path) -> None:
    cfg = SCMStorageConfig(tmp_path / "missing")
    assert not cfg.is_initialized
    with pytest.raises(StorageError, match=r"not initialized; run `ozone-scm scm --init`"):
        cfg.load()


def test_cluster_id_validation() -> None:
    assert validate_cluster_id("8C0F0000-AAAA-BBBB-CCCC-DDDDDDDDDDDD") == "CID-8c0f0000-aaaa-bbbb-cccc-dddddddddddd"
    with pytest.raises(StorageError, match="invalid cluster id"):
        validate_cluster_id("CID-123")


def test_properties_escapes_round_trip(tmp_path: Path) -> None:
    cfg = SCMStorageConfig(tmp_path)
    cfg.extra["weird"] = "a=b:c\\d"
    cfg.initialize(cluster_id=CID, scm_id=SCM_ID)
    assert SCMStorageConfig(tmp_path).extra["weird"] == "a=b:c\\d"

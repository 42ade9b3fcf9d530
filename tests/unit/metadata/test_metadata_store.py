"""scm.db tables, batches, corruption handling, checkpoints and the debug-ldb backend."""

from __future__ import annotations

import json
from pathlib import Path

import plyvel
import pytest

from scm_server.exceptions import StorageError
from scm_server.metadata import TRANSACTION_INFO_KEY, SCMDBDefinition, SCMMetadataStore, ldb
from scm_server.proto import hdds_pb2


def container(cid: int, state: int = hdds_pb2.OPEN) -> hdds_pb2.ContainerInfoProto:
    return hdds_pb2.ContainerInfoProto(containerID=cid, state=state, owner="om")  # type: ignore[arg-type]


def test_schema_lists_every_ozone_column_family() -> None:
    names = [cf.name for cf in SCMDBDefinition.column_families()]
    assert names == [
        "containers",
        "pipelines",
        "deletedBlocks",
        "sequenceId",
        "scmTransactionInfos",
        "validCerts",
        "validSCMCerts",
        "revokedCertificates",  # ours: Ozone removed its revocation tables in HDDS-10889
        "move",
        "meta",
        "statefulServiceConfig",
        "secretKeys",  # ours: Ozone keeps the secret keys in a file on each SCM
    ]
    assert len({cf.prefix for cf in SCMDBDefinition.column_families()}) == len(names)
    with pytest.raises(StorageError, match="unknown column family 'nope'; known column families: containers"):
        SCMDBDefinition.by_name("nope")


def test_tables_typed_get_put_delete_iterate(tmp_path: Path) -> None:
    store = SCMMetadataStore(tmp_path)
    try:
        for cid in (300, 2, 17):
            store.containers.put(cid, container(cid))
        store.meta.put("#LAYOUTVERSION", "1")
        store.stateful_service_config.put("ContainerBalancer", b"\x01\x02")
        store.sequence_id.put("localId", hdds_pb2.SequenceIdProto(lastId=99))
        assert [k for k, _ in store.containers.items()] == [2, 17, 300]  # numeric order
        assert list(store.containers.values()) == [v for _, v in store.containers.items()]  # keys not decoded
        assert store.containers.get(17) == container(17)
        assert store.containers.get(18) is None
        assert store.meta.get("#LAYOUTVERSION") == "1"
        assert store.stateful_service_config.get("ContainerBalancer") == b"\x01\x02"
        store.containers.delete(17)
        assert store.containers.count() == 2
        assert store.pipelines.is_empty()
        # Prefixes keep tables apart.
        assert store.sequence_id.count() == 1 and store.meta.count() == 1
        with pytest.raises(TypeError):
            store.containers.put("17", container(17))  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.containers.put(1, hdds_pb2.Pipeline())  # type: ignore[arg-type]
    finally:
        store.close()


def test_batch_is_atomic_across_tables(tmp_path: Path) -> None:
    store = SCMMetadataStore(tmp_path)
    batch = store.new_batch()
    store.containers.put_with_batch(batch, 1, container(1))
    store.transaction_info.put_with_batch(batch, TRANSACTION_INFO_KEY, hdds_pb2.TransactionInfoProto(term=2, index=7))
    assert store.containers.get(1) is None  # nothing visible before commit
    batch.commit()
    assert store.containers.get(1) == container(1)
    assert store.get_transaction_info() == hdds_pb2.TransactionInfoProto(term=2, index=7)
    store.close()
    reopened = SCMMetadataStore(tmp_path)
    assert reopened.containers.get(1) == container(1)
    reopened.close()


def test_bad_protobuf_value_gives_clear_storage_error(tmp_path: Path) -> None:
    store = SCMMetadataStore(tmp_path)
    store.containers.put(1, container(1))
    store.close()
    db = plyvel.DB(str(tmp_path / "scm.db"))
    db.put(b"containers/" + (2).to_bytes(8, "big"), b"\xff\xff\xffgarbage")
    db.put(b"containers/" + (3).to_bytes(8, "big"), hdds_pb2.ContainerInfoProto(containerID=3).SerializePartialToString())
    db.close()
    store = SCMMetadataStore(tmp_path)
    try:
        with pytest.raises(StorageError) as err:
            store.containers.get(2)
        assert "'containers'" in str(err.value) and "ContainerInfoProto" in str(err.value)
        assert "restore it from a checkpoint" in str(err.value)
        with pytest.raises(StorageError, match="missing required fields"):
            store.containers.get(3)
        with pytest.raises(StorageError):
            list(store.containers.items())
        with pytest.raises(StorageError, match="'containers'"):
            list(store.containers.values())
        # Nothing stored was damaged: the good row is still intact.
        assert store.containers.get(1) == container(1)
    finally:
        store.close()


def test_missing_metadata_dir_without_create(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"does not exist; run `ozone-scm scm --init`"):
        SCMMetadataStore(tmp_path / "nope", create=False)


def test_locked_db_is_reported(tmp_path: Path) -> None:
    store = SCMMetadataStore(tmp_path)
    try:
        with pytest.raises(StorageError, match="locked by another process"):
            SCMMetadataStore(tmp_path)
    finally:
        store.close()


def test_checkpoint_is_consistent_copy_and_replace_swaps(tmp_path: Path) -> None:
    live = SCMMetadataStore(tmp_path / "live")
    for cid in range(1, 6):
        live.containers.put(cid, container(cid))
    live.transaction_info.put(TRANSACTION_INFO_KEY, hdds_pb2.TransactionInfoProto(term=3, index=50))
    cp = live.checkpoint(tmp_path / "cp")
    live.containers.put(99, container(99))  # after the checkpoint: not in it
    assert SCMMetadataStore.read_transaction_info(cp) == hdds_pb2.TransactionInfoProto(term=3, index=50)
    with pytest.raises(StorageError, match="already exists"):
        live.checkpoint(tmp_path / "cp")

    other = SCMMetadataStore(tmp_path / "other")
    other.containers.put(1000, container(1000))
    backup = other.replace_from_checkpoint(cp)
    assert [k for k, _ in other.containers.items()] == [1, 2, 3, 4, 5]
    assert other.get_transaction_info() == hdds_pb2.TransactionInfoProto(term=3, index=50)
    assert backup.exists()
    other.close()
    live.close()


def test_replace_from_bad_checkpoint_rolls_back(tmp_path: Path) -> None:
    store = SCMMetadataStore(tmp_path / "live")
    store.containers.put(7, container(7))
    bogus = tmp_path / "bogus" / "scm.db"
    bogus.mkdir(parents=True)
    (bogus / "CURRENT").write_text("MANIFEST-000999\n")  # points at a manifest that does not exist
    with pytest.raises(StorageError):
        store.replace_from_checkpoint(bogus)
    # The live DB is untouched and still open.
    assert store.containers.get(7) == container(7)
    store.close()


def test_ldb_list_and_scan(tmp_path: Path) -> None:
    store = SCMMetadataStore(tmp_path)
    store.containers.put(2, container(2, hdds_pb2.CLOSED))
    store.containers.put(1, container(1))
    store.meta.put("#LAYOUTVERSION", "1")
    # While the SCM holds the DB, ldb scans a copy.
    lines = list(ldb.scan(tmp_path, "containers"))
    assert [json.loads(x)["key"] for x in lines] == [1, 2]
    assert json.loads(lines[1])["value"]["state"] == "CLOSED"
    store.close()
    families = {f["name"]: f for f in ldb.list_column_families(tmp_path / "scm.db")}
    assert families["containers"]["count"] == 2
    assert families["meta"]["value"] == "string"
    assert list(ldb.scan(tmp_path, "containers", limit=1)) == lines[:1]
    with pytest.raises(StorageError, match="not a LevelDB database"):
        list(ldb.scan(tmp_path / "nothing", "containers"))
    with pytest.raises(StorageError, match="unknown column family"):
        list(ldb.scan(tmp_path, "bogus"))


def test_swap_failure_after_moving_live_db_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SCMMetadataStore(tmp_path / "live")
    store.containers.put(7, container(7))
    bogus = tmp_path / "bogus" / "scm.db"
    bogus.mkdir(parents=True)
    (bogus / "CURRENT").write_text("MANIFEST-000999\n")
    # Pretend the verification passed so the swap itself fails when opening the new DB.
    monkeypatch.setattr(SCMMetadataStore, "read_transaction_info", staticmethod(lambda _p: None))
    with pytest.raises(StorageError, match=r"rolled back to the previous scm\.db"):
        store.replace_from_checkpoint(bogus)
    assert store.is_open
    assert store.containers.get(7) == container(7)
    store.close()

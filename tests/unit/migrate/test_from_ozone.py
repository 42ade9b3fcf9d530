"""``migrate from-ozone`` against an scm.db that Apache Ozone 2.2.0's own SCM wrote (tests/unit/migrate/data/,
made by tests/ozone_migrate/scenario.py; its README says how), compared with what Ozone's own CLI reported about
the same state (expected.json): the decoding, the store it writes, and every refusal."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from scm_server.cli.main import cli
from scm_server.conf import OzoneConfiguration
from scm_server.metadata.scm_metadata_store import SCMMetadataStore
from scm_server.metadata.storage_config import SCMStorageConfig
from scm_server.migrate import from_ozone, ozone_records
from scm_server.ports import free_port
from scm_server.proto import hdds_pb2
from scm_server.raft.storage import LevelDBStorage

DATA = Path(__file__).parent / "data" / "ozone-2.2.0"
EXPECTED = json.loads((DATA / "expected.json").read_text())
EXPECTED_CLUSTER = next(ln.split("=", 1)[1] for ln in (DATA / "scm" / "current" / "VERSION").read_text().splitlines()
                        if ln.startswith("clusterID="))


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def ozone(tmp_path: Path) -> Path:
    """A copy of the fixture (Ozone's metadata dir: scm.db, scm/current/VERSION, scm.ratis)."""
    dest = tmp_path / "ozone-meta"
    shutil.copytree(DATA, dest)
    return dest


def our_conf(target: Path, ratis_port: int | None = None) -> OzoneConfiguration:
    """A single SCM on loopback whose Raft port nothing listens on (unless the test binds it)."""
    return OzoneConfiguration({
        "ozone.metadata.dirs": str(target), "ozone.scm.db.dirs": str(target), "ozone.scm.names": "127.0.0.1",
        "ozone.scm.ratis.port": str(ratis_port or free_port()),
    })


def test_the_plan_matches_what_ozones_cli_reported(ozone: Path) -> None:
    plan = from_ozone.plan_from(from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    assert plan.refusals == []
    assert plan.version.cluster_id.startswith("CID-")
    got = {c.containerID: (hdds_pb2.LifeCycleState.Name(c.state), hdds_pb2.ReplicationFactor.Name(c.replicationFactor))
           for c in plan.containers}
    want = {c["containerID"]: (c["state"], c["replicationFactor"]) for c in EXPECTED["containers"]}
    assert got == want
    assert {p.id.id for p in plan.pipelines} == set(EXPECTED["pipelines"])
    assert all(c.pipelineID.id in set(EXPECTED["pipelines"]) for c in plan.containers)
    for p in plan.pipelines:
        assert p.members and all(m.uuid for m in p.members), p
    # every block Ozone handed out (the keys' locations) lies at or below the stored ceilings
    blocks = [tuple(b) for bs in EXPECTED["blocks"].values() for b in bs]
    assert blocks, "the fixture's keys have blocks"
    assert max(local for _, local in blocks) <= plan.sequence_ids["localId"]
    assert max(cid for cid, _ in blocks) <= plan.sequence_ids["containerId"]
    assert plan.term >= 1 and plan.index >= 1


def test_migration_writes_our_store_and_leaves_ozones_untouched(ozone: Path, tmp_path: Path) -> None:
    before = tree_digest(ozone)
    target = tmp_path / "ours"
    plan = from_ozone.plan_from(from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    result = from_ozone.migrate_from_ozone(our_conf(target), from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    assert tree_digest(ozone) == before

    storage = SCMStorageConfig(target)
    assert storage.is_initialized
    assert (storage.cluster_id, storage.scm_id) == (plan.version.cluster_id, plan.version.scm_id)
    assert storage.primary_scm_node_id == plan.version.scm_id and storage.scm_ha
    assert storage.layout_version == plan.version.layout_version == 10
    store = SCMMetadataStore(target, create=False)
    try:
        assert [v for _, v in store.containers.items()] == plan.containers
        assert sorted(v.id.id for _, v in store.pipelines.items()) == sorted(p.id.id for p in plan.pipelines)
        assert {k: v.lastId for k, v in store.sequence_id.items()} == plan.sequence_ids
        trx = store.get_transaction_info()
        assert trx is not None and (trx.term, trx.index) == (plan.term, plan.index)
        assert len(list(store.deleted_blocks.items())) == len(plan.deleted_blocks) == result.deleted_blocks
    finally:
        store.stop()
    group = target / "scm.ratis" / plan.version.cluster_id.removeprefix("CID-")
    raft = LevelDBStorage(group)
    try:
        assert raft.hard_state().term > plan.term  # datanodes drop commands of a term older than they saw
        assert raft.snapshot_metadata().index == plan.index
        assert raft.conf_state().voters == (plan.version.scm_id,)
    finally:
        raft.close()


def test_dry_run_prints_the_plan_and_writes_nothing(ozone: Path, tmp_path: Path) -> None:
    before = tree_digest(ozone)
    target = tmp_path / "ours"
    out = CliRunner().invoke(cli, ["migrate", "from-ozone", "--ozone-db", str(ozone / "scm.db"), "--to",
                                   str(target), "--dry-run"])
    assert out.exit_code == 0, out.output
    assert f"containers: {len(EXPECTED['containers'])}" in out.output
    assert "sequence ceilings: " in out.output and "localId=" in out.output
    assert f"clusterID {EXPECTED_CLUSTER}" in out.output
    assert not target.exists() and tree_digest(ozone) == before


def test_refuses_a_target_that_holds_data(ozone: Path, tmp_path: Path) -> None:
    target = tmp_path / "ours"
    sources = from_ozone.OzoneSources.from_db(ozone / "scm.db")
    from_ozone.migrate_from_ozone(our_conf(target), sources)
    version_before = (target / "scm" / "current" / "VERSION").read_bytes()
    with pytest.raises(from_ozone.MigrationRefused, match="already holds data"):
        from_ozone.migrate_from_ozone(our_conf(target), sources)
    assert (target / "scm" / "current" / "VERSION").read_bytes() == version_before


def test_refuses_a_db_an_ozone_scm_holds(ozone: Path, tmp_path: Path) -> None:
    """A RocksDB opened for writing by another process (as a running Ozone SCM holds it) is refused."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, rocksdict\n"
         "names = rocksdict.Rdict.list_cf(sys.argv[1])\n"
         "db = rocksdict.Rdict(sys.argv[1], options=rocksdict.Options(raw_mode=True), "
         "column_families={n: rocksdict.Options(raw_mode=True) for n in names})\n"
         "print('open', flush=True)\nsys.stdin.read()\ndb.close()\n",
         str(ozone / "scm.db")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(from_ozone.MigrationRefused, match=r"is in use .* stop the Ozone SCM"):
            from_ozone.plan_from(from_ozone.OzoneSources.from_db(ozone / "scm.db"))
        assert not (tmp_path / "ours").exists()
    finally:
        holder.communicate("", timeout=30)


def test_refuses_a_rocksdb_that_is_not_an_scm_db(tmp_path: Path) -> None:
    import rocksdict

    other = tmp_path / "om.db"
    db = rocksdict.Rdict(str(other), options=rocksdict.Options(raw_mode=True))
    db[b"k"] = b"v"
    db.close()
    (tmp_path / "scm" / "current").mkdir(parents=True)
    shutil.copy(DATA / "scm" / "current" / "VERSION", tmp_path / "scm" / "current" / "VERSION")
    with pytest.raises(from_ozone.MigrationRefused, match=r"not an Ozone SCM's scm\.db"):
        from_ozone.plan_from(from_ozone.OzoneSources.from_db(other))


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "is not a directory"),
    (lambda p: p.mkdir(), "holds no RocksDB"),
])
def test_refuses_a_path_that_is_no_db(tmp_path: Path, make: object, message: str) -> None:
    db = tmp_path / "scm.db"
    make(db)  # type: ignore[operator]
    with pytest.raises(from_ozone.MigrationRefused, match=message):
        from_ozone.plan_from(from_ozone.OzoneSources.from_db(db))


def test_refuses_a_version_file_of_another_node_type(ozone: Path) -> None:
    version = ozone / "scm" / "current" / "VERSION"
    version.write_text(version.read_text().replace("nodeType=SCM", "nodeType=OM"))
    with pytest.raises(from_ozone.MigrationRefused, match="nodeType is 'OM', not 'SCM'"):
        from_ozone.plan_from(from_ozone.OzoneSources.from_db(ozone / "scm.db"))


def test_ozones_layout_version_carries_over_and_a_newer_one_is_refused(ozone: Path, tmp_path: Path) -> None:
    version = ozone / "scm" / "current" / "VERSION"
    text = version.read_text()
    assert "layoutVersion=10" in text  # Ozone 2.2.0's, finalized
    # an Ozone cluster upgraded from 1.4.1 and not finalized yet stays unfinalized on our ring
    version.write_text(text.replace("layoutVersion=10", "layoutVersion=7"))
    target = tmp_path / "ours"
    from_ozone.migrate_from_ozone(our_conf(target), from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    assert SCMStorageConfig(target).layout_version == 7
    version.write_text(text.replace("layoutVersion=10", "layoutVersion=11"))
    with pytest.raises(from_ozone.MigrationRefused, match=r"layoutVersion=11 is not an HDDS layout version this SCM "
                       r"knows \(0\.\.10, Ozone 2\.2\.0's\); migrate from an Ozone release up to 2\.2\.0"):
        from_ozone.plan_from(from_ozone.OzoneSources.from_db(ozone / "scm.db"))


def test_ratis_segments_decode_in_order(ozone: Path) -> None:
    plan = from_ozone.plan_from(from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    entries = from_ozone.read_ratis_log(ozone / "scm.ratis", plan.version.cluster_id, 0)
    indexes = [e.index for e in entries]
    assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)
    assert {e.kind for e in entries} <= {ozone_records.STATE_MACHINE_ENTRY, ozone_records.CONFIGURATION_ENTRY,
                                        ozone_records.METADATA_ENTRY}
    assert any(e.kind == ozone_records.STATE_MACHINE_ENTRY for e in entries)
    assert all(e.term >= 1 for e in entries) and max(e.term for e in entries) <= plan.term + 1
    # scm.db was flushed after the last state-machine entry, so nothing is pending at its index ...
    assert ozone_records.pending_entries(entries, plan.index) == []
    # ... and an scm.db one entry behind that would be refused
    last = max(e.index for e in entries if e.kind == ozone_records.STATE_MACHINE_ENTRY)
    assert [e.index for e in ozone_records.pending_entries(entries, last - 1)] == [last]


def test_a_log_beyond_scm_db_is_refused_with_the_way_out(ozone: Path) -> None:
    plan = from_ozone.plan_from(from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    entries = from_ozone.read_ratis_log(ozone / "scm.ratis", plan.version.cluster_id, 0)
    last = max(e.index for e in entries if e.kind == ozone_records.STATE_MACHINE_ENTRY)
    import rocksdict

    # roll scm.db's transaction info back one entry, as a stop before the buffer's flush leaves it
    names = rocksdict.Rdict.list_cf(str(ozone / "scm.db"))
    db = rocksdict.Rdict(str(ozone / "scm.db"), options=rocksdict.Options(raw_mode=True),
                         column_families={n: rocksdict.Options(raw_mode=True) for n in names})
    db.get_column_family("scmTransactionInfos")[b"#TRANSACTIONINFO"] = f"{plan.term}#{last - 1}".encode()
    db.close()
    with pytest.raises(from_ozone.MigrationRefused, match=r"dbtransactionbuffer\.flush\.interval"):
        from_ozone.migrate_from_ozone(our_conf(ozone.parent / "ours"),
                                      from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    assert not (ozone.parent / "ours").exists()


def test_refuses_on_a_member_that_is_not_the_primordial_one(ozone: Path, tmp_path: Path) -> None:
    conf = OzoneConfiguration({
        "ozone.metadata.dirs": str(tmp_path / "ours"), "ozone.scm.service.ids": "svc",
        "ozone.scm.nodes.svc": "scm1,scm2", "ozone.scm.address.svc.scm1": "127.0.0.1",
        "ozone.scm.address.svc.scm2": "127.0.0.1", "ozone.scm.node.id": "scm2", "ozone.scm.primordial.node.id": "scm1",
    })
    with pytest.raises(from_ozone.MigrationRefused, match=r"not the primordial one .* ozone\.scm\.primordial\.node\.id=scm2"):
        from_ozone.migrate_from_ozone(conf, from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    assert not (tmp_path / "ours").exists()


def test_a_value_that_is_not_ozones_is_refused_in_one_line_naming_table_and_key(ozone: Path) -> None:
    import rocksdict

    names = rocksdict.Rdict.list_cf(str(ozone / "scm.db"))
    db = rocksdict.Rdict(str(ozone / "scm.db"), options=rocksdict.Options(raw_mode=True),
                         column_families={n: rocksdict.Options(raw_mode=True) for n in names})
    db.get_column_family("containers")[(1).to_bytes(8, "big")] = b"\xff\xff\xff"
    db.close()
    out = CliRunner().invoke(cli, ["migrate", "from-ozone", "--ozone-db", str(ozone / "scm.db"), "--dry-run"])
    assert out.exit_code == 1
    assert "containers[1]: not a ContainerInfoProto" in out.output and len(out.output.strip().splitlines()) == 1


def test_the_cli_names_a_missing_db_in_one_line(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["migrate", "from-ozone", "--ozone-db", str(tmp_path / "nope"), "--to",
                                   str(tmp_path / "ours")])
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1
    assert "is not a directory; give <ozone.scm.db.dirs>/scm.db" in out.output
    assert not (tmp_path / "ours").exists()


def test_a_segment_torn_by_a_crash_ends_at_its_last_whole_entry() -> None:
    """Ozone's own in-progress segment cut in the middle of its last entry (as a crash mid-write leaves it)."""
    segment = next((DATA / "scm.ratis").rglob("log_inprogress_*"))
    data = segment.read_bytes()
    whole = ozone_records.decode_segment(data, segment.name)
    assert len(whole) > 2
    torn = ozone_records.decode_segment(data[: len(data) - 6], segment.name)
    assert torn == whole[:-1]
    with pytest.raises(ozone_records.NotOzoneSCMData, match="no RaftLog1 header"):
        ozone_records.decode_segment(data[8:], segment.name)


def test_the_deleted_keys_blocks_come_over_as_pending_deletions(ozone: Path, tmp_path: Path) -> None:
    """Ozone's SCM held the blocks of the key deleted before the stop in deletedBlocks; they come over as they are,
    below the delTxnId ceiling, and our store holds them."""
    plan = from_ozone.plan_from(from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    deleted = {tuple(b) for blocks in EXPECTED["deleted"].values() for b in blocks}
    assert deleted and {(t.containerID, local) for t in plan.deleted_blocks for local in t.localID} == deleted
    assert all(0 < t.txID <= plan.sequence_ids["delTxnId"] for t in plan.deleted_blocks)
    from_ozone.migrate_from_ozone(our_conf(tmp_path / "ours"), from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    store = SCMMetadataStore(tmp_path / "ours", create=False)
    try:
        assert [v for _, v in store.deleted_blocks.items()] == plan.deleted_blocks
    finally:
        store.stop()


def test_refuses_while_something_answers_on_the_rings_addresses(ozone: Path, tmp_path: Path) -> None:
    """An Ozone SCM still running at an address of the ring (here: something listening on its Raft port)."""
    with socket.create_server(("127.0.0.1", 0)) as live:
        port = live.getsockname()[1]
        with pytest.raises(from_ozone.MigrationRefused, match=rf"something answers at 127\.0\.0\.1:{port} .* stop every Ozone SCM"):
            from_ozone.migrate_from_ozone(our_conf(tmp_path / "ours", port),
                                          from_ozone.OzoneSources.from_db(ozone / "scm.db"))
    assert not (tmp_path / "ours").exists()


def test_the_cli_migrates_into_the_directory_to_names(ozone: Path, tmp_path: Path) -> None:
    target = tmp_path / "ours"
    env = {"OZONE-SITE.XML_ozone.scm.names": "127.0.0.1", "OZONE-SITE.XML_ozone.scm.ratis.port": str(free_port())}
    out = CliRunner(env=env).invoke(cli, ["migrate", "from-ozone", "--ozone-db", str(ozone / "scm.db"), "--to",
                                          str(target)])
    assert out.exit_code == 0, out.output
    assert f"Migrated cluster {EXPECTED_CLUSTER}" in out.output and "scm --bootstrap" in out.output
    assert SCMStorageConfig(target).cluster_id == EXPECTED_CLUSTER

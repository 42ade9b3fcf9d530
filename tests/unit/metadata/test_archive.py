"""Unpacking checkpoint archives (``scm_server.metadata.archive``): files and directories below the destination are
unpacked, every other member is refused with a line naming it, on interpreters with and without tarfile's filters
(the project's image runs Debian's Python 3.11.2, which has none)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from scm_server.metadata import archive
from scm_server.metadata.backup import CHECKPOINT_FILE, BackupError, unpack_checkpoint


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.uid = info.gid = 4242  # an owner the unpacking process is not: never applied
    return info, data


def _dir(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info, None


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


@pytest.fixture(params=["with the interpreter's filters", "without them (Python 3.11.2)"])
def filters(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    has = request.param.startswith("with ") and hasattr(tarfile, "data_filter")
    monkeypatch.setattr(archive, "_HAS_FILTERS", has)
    return has


def _unpack(data: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        archive.extract_files(tar, dest)


def test_files_and_directories_unpack_owned_by_the_process(tmp_path: Path, filters: bool) -> None:
    data = _archive(_dir("scm.db"), _file("scm.db/000001.ldb", b"leveldb bytes", 0o4777),
                    _file("scm.db/sub/CURRENT", b"MANIFEST-000002\n"))
    _unpack(data, tmp_path)
    assert (tmp_path / "scm.db" / "000001.ldb").read_bytes() == b"leveldb bytes"
    assert (tmp_path / "scm.db" / "sub" / "CURRENT").read_bytes() == b"MANIFEST-000002\n"
    st = (tmp_path / "scm.db" / "000001.ldb").stat()
    assert st.st_mode & 0o7000 == 0  # no setuid from the archive
    assert st.st_uid == (tmp_path.stat().st_uid)


@pytest.mark.parametrize(("member", "why"), [
    (_file("/etc/evil", b"x"), "absolute"),
    (_file("scm.db/../../evil", b"x"), "'..'"),
    (_link("scm.db/link", "/etc/passwd"), "not a regular file"),
    (_link("scm.db/hard", "scm.db/000001.ldb", tarfile.LNKTYPE), "not a regular file"),
])
def test_anything_but_files_and_directories_below_is_refused_and_nothing_is_written(
        tmp_path: Path, filters: bool, member: tuple[tarfile.TarInfo, bytes | None], why: str) -> None:
    data = _archive(_file("scm.db/000001.ldb", b"ok"), member)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(archive.UnsafeArchiveError, match=why) as info:
        _unpack(data, dest)
    assert repr(member[0].name) in str(info.value)
    assert list(dest.iterdir()) == []  # checked before anything is extracted


def test_a_backup_with_a_link_is_refused_in_one_line(tmp_path: Path, filters: bool) -> None:
    backup = tmp_path / "b"
    backup.mkdir()
    (backup / CHECKPOINT_FILE).write_bytes(_archive(_dir("scm.db"), _link("scm.db/x", "/etc/passwd")))
    with pytest.raises(BackupError, match=r"cannot be unpacked .*'scm.db/x' is not a regular file") as info:
        unpack_checkpoint(backup, tmp_path / "staging")
    assert "\n" not in str(info.value)


def test_a_backup_unpacks_into_scm_db(tmp_path: Path, filters: bool) -> None:
    backup = tmp_path / "b"
    backup.mkdir()
    (backup / CHECKPOINT_FILE).write_bytes(_archive(_dir("scm.db"), _file("scm.db/CURRENT", b"m")))
    assert unpack_checkpoint(backup, tmp_path / "staging") == tmp_path / "staging" / "scm.db"
    assert (tmp_path / "staging" / "scm.db" / "CURRENT").read_bytes() == b"m"


def test_extraction_does_not_depend_on_tarfiles_filter_keyword(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As on Python 3.11.2: ``extract`` has no ``filter`` keyword at all."""
    monkeypatch.setattr(archive, "_HAS_FILTERS", False)
    original = tarfile.TarFile.extract

    def extract_without_filter(self: tarfile.TarFile, member: tarfile.TarInfo, path: str | Path = "",
                               set_attrs: bool = True, **kw: object) -> None:
        if kw:
            raise TypeError(f"TarFile.extract() got an unexpected keyword argument {next(iter(kw))!r}")
        original(self, member, path, set_attrs=set_attrs)

    monkeypatch.setattr(tarfile.TarFile, "extract", extract_without_filter)
    monkeypatch.setattr(tarfile.TarFile, "extractall", lambda *a, **k: (_ for _ in ()).throw(
        TypeError("TarFile.extractall() got an unexpected keyword argument 'filter'")))
    _unpack(_archive(_dir("scm.db"), _file("scm.db/CURRENT", b"m")), tmp_path)
    assert (tmp_path / "scm.db" / "CURRENT").read_bytes() == b"m"

"""Unpacking the checkpoint archives SCMs exchange (a backup's ``checkpoint.tar.gz``, a leader's checkpoint stream)
with only regular files and directories below the destination, on every Python the project supports.

``TarFile.extractall(filter="data")`` arrived in a CPython security release (3.11.4); the Debian base of the
project's image ships 3.11.2, where the keyword is a ``TypeError``. So the archive is checked here first, the same
way on every interpreter: each member must be a regular file or a directory with a relative name that stays below
the destination (no absolute path, no ``..``, no link, device or FIFO: a checkpoint never holds one). The members
are then extracted without their recorded owner, mode or times (``set_attrs=False``: the files belong to the
process that unpacks them, with its umask, as on a volume whose owner is the Pod's ``fsGroup``). Called by
``metadata.backup.unpack_checkpoint`` and ``ha.inter_scm_client``; no other I/O than the extraction.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath


class UnsafeArchiveError(tarfile.TarError):
    """A member the checkpoint archive must not hold; its message names the member and why."""


def refusal(member: tarfile.TarInfo) -> str | None:
    """Why ``member`` may not be unpacked (None: it may): pure, reads only the member's header."""
    name = member.name
    path = PurePosixPath(name)
    if not name or path.is_absolute() or name.startswith("/"):
        return f"member {name!r} has an absolute or empty path"
    if ".." in path.parts:
        return f"member {name!r} leaves the destination (a '..' component)"
    if not (member.isreg() or member.isdir()):
        return f"member {name!r} is not a regular file or a directory (type {member.type!r})"
    return None


def check_members(members: Iterable[tarfile.TarInfo]) -> list[tarfile.TarInfo]:
    """The members, in order, once every one of them may be unpacked; ``UnsafeArchiveError`` for the first that
    may not."""
    out = []
    for m in members:
        why = refusal(m)
        if why is not None:
            raise UnsafeArchiveError(f"{why}; a checkpoint holds only files and directories below scm.db")
        out.append(m)
    return out


def extract_files(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack every member of ``tar`` below ``dest`` after ``check_members`` accepted them all."""
    members = check_members(tar.getmembers())
    root = dest.resolve()
    for m in members:
        target = (root / m.name).resolve()
        if target != root and root not in target.parents:  # e.g. through a directory that was a link already
            raise UnsafeArchiveError(f"member {m.name!r} resolves outside {dest}")
        if _HAS_FILTERS:  # the interpreter's own check as well, where it has one
            tar.extract(m, root, set_attrs=False, filter="data")
        else:
            tar.extract(m, root, set_attrs=False)


_HAS_FILTERS = hasattr(tarfile, "data_filter")

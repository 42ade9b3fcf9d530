"""SCMStorageConfig: the ``<scm db dir>/scm/current/VERSION`` file (Ozone's StorageInfo + SCM fields).

Java properties format, as Ozone writes it::

    #Sun Nov 22 01:02:03 UTC 2026
    clusterID=CID-8c0f...
    cTime=1763773323000
    layoutVersion=10
    nodeType=SCM
    primaryScmNodeId=2f1e...
    scmHA=true
    scmUuid=2f1e...

``initialize()`` writes atomically (tmp file + fsync + rename + directory fsync) so a crash never
leaves a half-written VERSION. ``load()`` validates every required field and raises
StorageError naming the file, the field and the fix.
"""

from __future__ import annotations

import enum
import os
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

from scm_server.exceptions import StorageError

CLUSTER_ID_PREFIX = "CID-"
STORAGE_DIR = "scm"
STORAGE_DIR_CURRENT = "current"
STORAGE_FILE_VERSION = "VERSION"
NODE_TYPE = "SCM"
# The HDDS layout version a new SCM starts at: the newest feature of Ozone 2.2.0's HDDSLayoutFeature
# (scm_server.hdds_layout.SOFTWARE_LAYOUT_VERSION; a test keeps the two equal).
CURRENT_LAYOUT_VERSION = 10

_REQUIRED = ("nodeType", "clusterID", "cTime", "layoutVersion", "scmUuid")
_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class StorageState(enum.Enum):
    NOT_INITIALIZED = "NOT_INITIALIZED"
    INITIALIZED = "INITIALIZED"


def new_cluster_id() -> str:
    return CLUSTER_ID_PREFIX + str(uuid.uuid4())


def validate_cluster_id(cluster_id: str) -> str:
    """Accept ``CID-<uuid>`` or a bare UUID (Ozone's --clusterid); return the CID- form."""
    bare = cluster_id[len(CLUSTER_ID_PREFIX) :] if cluster_id.startswith(CLUSTER_ID_PREFIX) else cluster_id
    if not _UUID_RE.match(bare):
        raise StorageError(
            f"invalid cluster id {cluster_id!r}: expected CID-<uuid> or a UUID "
            "(e.g. CID-3f1b2c4d-1111-2222-3333-444455556666)"
        )
    return CLUSTER_ID_PREFIX + bare.lower()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\:").replace("=", "\\=")


def _unescape(value: str) -> str:
    out = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse the subset of java.util.Properties that VERSION files use (``key=value``, ``#`` comments)."""
    props: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"^((?:[^=:\\]|\\.)+?)\s*[=:]\s*(.*)$", line)
        if not m:
            raise ValueError(f"line {lineno} is not key=value: {raw!r}")
        props[_unescape(m.group(1).strip())] = _unescape(m.group(2))
    return props


def render_properties(props: dict[str, str], now: datetime) -> str:
    header = "#" + now.strftime("%a %b %d %H:%M:%S UTC %Y")
    lines = [header] + [f"{_escape(k)}={_escape(v)}" for k, v in sorted(props.items())]
    return "\n".join(lines) + "\n"


def atomic_write(path: Path, data: str) -> None:
    """tmp + fsync + rename + fsync(dir): readers see the old or the new file, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(str(path.parent), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class SCMStorageConfig:
    """The SCM VERSION file under ``storage_dir`` (= ozone.scm.db.dirs or ozone.metadata.dirs)."""

    def __init__(self, storage_dir: Path | str) -> None:
        self.storage_dir = Path(storage_dir)
        self.current_dir = self.storage_dir / STORAGE_DIR / STORAGE_DIR_CURRENT
        self.version_file = self.current_dir / STORAGE_FILE_VERSION
        self.cluster_id: str | None = None
        self.scm_id: str | None = None
        self.c_time: int = 0
        self.layout_version: int = CURRENT_LAYOUT_VERSION
        self.primary_scm_node_id: str | None = None
        self.scm_ha: bool = False
        self.scm_cert_serial_id: str | None = None
        self.extra: dict[str, str] = {}
        self.state = StorageState.NOT_INITIALIZED
        if self.version_file.exists():
            self.load()

    @property
    def is_initialized(self) -> bool:
        return self.state is StorageState.INITIALIZED

    def _fail(self, field: str, problem: str) -> StorageError:
        return StorageError(
            f"{self.version_file}: field {field!r} {problem}. The VERSION file is corrupt: restore it from a backup "
            "or move the metadata directory away and run `ozone-scm scm --init` (or --bootstrap) again"
        )

    def load(self) -> None:
        try:
            text = self.version_file.read_text("utf-8")
        except FileNotFoundError:
            raise StorageError(
                f"{self.version_file} does not exist: SCM storage is not initialized; run `ozone-scm scm --init` "
                "on the primordial SCM or `ozone-scm scm --bootstrap` on the others"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise StorageError(f"{self.version_file} cannot be read ({exc}); check permissions and disk") from exc
        try:
            props = parse_properties(text)
        except ValueError as exc:
            raise StorageError(f"{self.version_file}: {exc}; the VERSION file is corrupt") from exc
        for field in _REQUIRED:
            if not props.get(field):
                raise self._fail(field, "is missing")
        if props["nodeType"] != NODE_TYPE:
            raise self._fail("nodeType", f"is {props['nodeType']!r}, expected {NODE_TYPE!r} (wrong directory?)")
        try:
            cluster_id = validate_cluster_id(props["clusterID"])
        except StorageError:
            raise self._fail("clusterID", f"has invalid value {props['clusterID']!r} (expected CID-<uuid>)") from None
        for field in ("cTime", "layoutVersion"):
            if not re.fullmatch(r"-?\d+", props[field]):
                raise self._fail(field, f"has non-numeric value {props[field]!r}")
        if not _UUID_RE.match(props["scmUuid"]):
            raise self._fail("scmUuid", f"has invalid value {props['scmUuid']!r} (expected a UUID)")
        scm_ha = props.get("scmHA", "false").lower()
        if scm_ha not in ("true", "false"):
            raise self._fail("scmHA", f"has invalid value {props['scmHA']!r} (expected true or false)")
        self.cluster_id = cluster_id
        self.scm_id = props["scmUuid"]
        self.c_time = int(props["cTime"])
        self.layout_version = int(props["layoutVersion"])
        self.primary_scm_node_id = props.get("primaryScmNodeId") or None
        self.scm_ha = scm_ha == "true"
        self.scm_cert_serial_id = props.get("scmCertSerialId") or None
        known = {*_REQUIRED, "primaryScmNodeId", "scmHA", "scmCertSerialId"}
        self.extra = {k: v for k, v in props.items() if k not in known}
        self.state = StorageState.INITIALIZED

    def to_properties(self) -> dict[str, str]:
        if self.cluster_id is None or self.scm_id is None:
            raise StorageError(f"{self.version_file}: cannot write VERSION without clusterID and scmUuid")
        props = dict(self.extra)
        props.update(
            {
                "nodeType": NODE_TYPE,
                "clusterID": self.cluster_id,
                "cTime": str(self.c_time),
                "layoutVersion": str(self.layout_version),
                "scmUuid": self.scm_id,
                "scmHA": "true" if self.scm_ha else "false",
            }
        )
        if self.primary_scm_node_id:
            props["primaryScmNodeId"] = self.primary_scm_node_id
        if self.scm_cert_serial_id:
            props["scmCertSerialId"] = self.scm_cert_serial_id
        return props

    def initialize(
        self,
        *,
        cluster_id: str | None = None,
        scm_id: str | None = None,
        primary_scm_node_id: str | None = None,
        scm_ha: bool | None = None,
        now: datetime | None = None,
    ) -> None:
        """Create (or rewrite) VERSION atomically. New IDs are generated if none are set yet."""
        when = now or datetime.now(UTC)
        if cluster_id is not None:
            self.cluster_id = validate_cluster_id(cluster_id)
        elif self.cluster_id is None:
            self.cluster_id = new_cluster_id()
        if scm_id is not None:
            self.scm_id = scm_id
        elif self.scm_id is None:
            self.scm_id = str(uuid.uuid4())
        if primary_scm_node_id is not None:
            self.primary_scm_node_id = primary_scm_node_id
        if scm_ha is not None:
            self.scm_ha = scm_ha
        if not self.c_time:
            self.c_time = int(when.timestamp() * 1000)
        self.persist(now=when)

    def persist(self, now: datetime | None = None) -> None:
        props = self.to_properties()
        try:
            self.current_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(self.version_file, render_properties(props, now or datetime.now(UTC)))
        except OSError as exc:
            raise StorageError(f"cannot write {self.version_file}: {exc}; check the directory is writable") from exc
        self.state = StorageState.INITIALIZED

    def set_cluster_id(self, cluster_id: str) -> None:
        self.cluster_id = validate_cluster_id(cluster_id)

    def set_primary_scm_node_id(self, scm_id: str) -> None:
        self.primary_scm_node_id = scm_id

    def set_scm_ha(self, enabled: bool) -> None:
        self.scm_ha = enabled

    def set_scm_cert_serial_id(self, serial: str) -> None:
        self.scm_cert_serial_id = serial

    @property
    def raft_group_id(self) -> str:
        """The Raft group id: the clusterID UUID without ``CID-`` (Ozone's buildRaftGroupId)."""
        if self.cluster_id is None:
            raise StorageError(f"{self.version_file}: storage not initialized, no cluster id")
        return self.cluster_id[len(CLUSTER_ID_PREFIX) :]

"""The ``OzoneSCMCluster`` spec as typed values: parsing, the CRD's defaults, and the operator's own validation.

Called by the reconciler on every pass (``parse_spec``, then ``effective_spec`` with the values recorded in
status). Pure: no I/O, no clock.

Why validate here when the CRD already has a schema and CEL rules: an API server without CEL (or the emulated
one in the tests), a resource stored before a rule existed, or a rule that cannot be expressed cheaply in CEL
(keys of ``ozoneSite``) must still never make the operator act on bad input. A problem becomes a
:class:`SpecProblem` (one line: what is wrong and how to fix it); the reconciler reports it as a condition and an
Event and keeps the cluster running on the last valid values (``effective_spec``), deleting nothing.

The defaults below must equal the CRD's ``default:`` values (``crds/ozonescmclusters.yaml``); a unit test applies
the schema's defaults to minimal resources and compares.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from croniter import CroniterBadDateError, croniter

from ozone_scm_operator import naming

ALLOWED_REPLICAS = (1, 3, 5)
DEFAULT_IMAGE = "ozone-scm:0.1.0"
CA_MODES = ("operator", "scm")
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")

# ozone-site.xml keys the operator owns (spec.ozoneSite may not set them).
OWNED_KEYS = frozenset(
    {
        "ozone.scm.service.ids",
        "ozone.scm.default.service.id",
        "ozone.scm.node.id",
        "ozone.scm.primordial.node.id",
        "ozone.metadata.dirs",
        "ozone.scm.db.dirs",
        "ozone.scm.ha.ratis.storage.dir",
        "ozone.scm.names",
        "ozone.security.enabled",
        *naming.PORT_KEYS.values(),
        "ozone.scm.http-address",
    }
)
OWNED_PREFIXES = ("ozone.scm.nodes.", "ozone.scm.address.", "hdds.x509.")
# the retired opt-in Hadoop RPC keys (ozone.scm.<x>.hadoop-rpc.port): Ozone's own port keys serve Hadoop RPC now
RETIRED_PORT_INFIX = ".hadoop-rpc."

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_SPARK_MASTER = re.compile(r"^(local(\[([0-9]+|\*)\])?|k8s://.+)$")
_SPARK_MEMORY = re.compile(r"^[1-9][0-9]*[kmgt]$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> datetime.timedelta:
    """A Kubernetes/Go duration such as ``10m``, ``1h30m``, ``500ms`` or ``0s``; ValueError otherwise."""
    s = text.strip()
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(f"{text!r} is not a duration; write it like 30s, 10m, 1h30m or 0s")
    return datetime.timedelta(seconds=total)


def format_duration(d: datetime.timedelta) -> str:
    seconds = d.total_seconds()
    if seconds and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


@dataclasses.dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with the spec: ``field`` is its path, ``message`` says what and how to fix it. ``restore``:
    the spec paths whose last valid (recorded) value replaces the bad one (``read_spec``); empty when the problem
    is handled otherwise (``ozoneSite`` keys the operator owns are dropped, the rest applies)."""

    field: str
    message: str
    restore: tuple[str, ...] | None = dataclasses.field(default=None, compare=False)

    @property
    def restore_paths(self) -> tuple[str, ...]:
        if self.restore is not None:
            return self.restore
        return (self.field.split("[", 1)[0],)  # a bad list item: the whole list

    def __str__(self) -> str:
        return f"spec.{self.field}: {self.message}"


RECLAIM_POLICIES = ("Retain", "Delete")


@dataclasses.dataclass(frozen=True)
class StorageSpec:
    size: str = "10Gi"
    storage_class_name: str | None = None
    reclaim_policy: str = "Retain"  # Retain: the members' volumes outlive the resource; Delete: owned, deleted with it
    adopt_cluster_id: str | None = None  # retained volumes of this cluster ID are taken over by a new resource


_QUANTITY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "k": 10**3,
                    "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "": 1}


def quantity_bytes(size: str) -> Fraction:
    """The amount of a storage quantity (``10Gi``, ``1.5T``, ``500M``) as the API server compares them."""
    m = re.match(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$", size)
    if m is None:
        raise ValueError(f"{size!r} is not a Kubernetes quantity")
    return Fraction(m.group(1)) * _QUANTITY_SUFFIX[m.group(2) or ""]


# ozone-site.xml keys the operator owns when spec.security.kerberos is set (rendered from it)
KERBEROS_KEYS = frozenset({"hadoop.security.authentication", "hdds.scm.kerberos.principal",
                           "hdds.scm.kerberos.keytab.file"})
_PRINCIPAL = re.compile(r"^[^/@\s]+(/[^/@\s]+)?@[^/@\s]+$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclasses.dataclass(frozen=True)
class KerberosSpec:
    """Kerberos on the members' Hadoop RPC listeners (``spec.security.kerberos``): the Secret holding the SCM's
    keytab (mounted read-only, mode 0400), the principal pattern (``scm/_HOST@REALM``: ``_HOST`` is each member's
    canonical host name, so the keytab holds one key per member host), and optionally the ConfigMap holding the
    realm's ``krb5.conf``. The KDC is outside the operator's concern."""

    keytab_secret: str
    principal: str
    keytab_key: str = "scm.keytab"
    krb5_config_map: str | None = None

    @property
    def realm(self) -> str:
        return self.principal.rsplit("@", 1)[1]


@dataclasses.dataclass(frozen=True)
class SecuritySpec:
    enabled: bool = False
    ca_mode: str = "operator"
    certificate_duration: datetime.timedelta = datetime.timedelta(hours=720)
    renew_before: datetime.timedelta = datetime.timedelta(hours=168)
    root_ca_duration: datetime.timedelta = datetime.timedelta(hours=87600)
    kerberos: KerberosSpec | None = None

    @property
    def operator_ca(self) -> bool:
        """The operator holds the root CA and issues the members' sub-CA certificates."""
        return self.enabled and self.ca_mode == "operator"

    @property
    def scm_ca(self) -> bool:
        """Ozone's way: the primordial SCM creates the root CA at ``--init``, joiners enrol with a CSR."""
        return self.enabled and self.ca_mode == "scm"


@dataclasses.dataclass(frozen=True)
class SchedulingSpec:
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    affinity: Mapping[str, Any] | None = None
    tolerations: Sequence[Mapping[str, Any]] = ()
    topology_spread_constraints: Sequence[Mapping[str, Any]] = ()
    priority_class_name: str | None = None


@dataclasses.dataclass(frozen=True)
class ServiceSpec:
    type: str = "ClusterIP"
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class MembershipSpec:
    replace_after: datetime.timedelta = datetime.timedelta(minutes=10)
    max_catch_up_lag: int = 100
    operation_timeout: datetime.timedelta = datetime.timedelta(minutes=5)


@dataclasses.dataclass(frozen=True)
class AuditExecutors:
    """``spec.audit.executors``: the executor Pods Spark's Kubernetes scheduler backend starts when ``master`` is
    ``k8s://...`` (unused in local mode). ``memory`` is the executor JVM's heap in Spark's notation (Spark adds its
    memory overhead to the Pod's request)."""

    instances: int = 2
    cores: int = 1
    memory: str = "1g"
    cpu_request: str | None = None  # the Pod's CPU request; None: ``cores``


@dataclasses.dataclass(frozen=True)
class AuditSpec:
    enabled: bool = False
    schedule: str = "0 3 * * *"
    suspend: bool = False
    image: str | None = None
    master: str = "local[*]"
    successful_jobs_history_limit: int = 3
    failed_jobs_history_limit: int = 1
    report_storage_size: str = "1Gi"
    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # with executors on Kubernetes: the ServiceAccount the audit Pod (Spark's driver) runs as, allowed to create and
    # delete the executor Pods (the chart creates it with that Role); and the executors
    service_account_name: str = "ozone-scm-audit"
    executors: AuditExecutors = AuditExecutors()

    @property
    def on_kubernetes(self) -> bool:
        """Spark's executors run as Pods (``k8s://`` master); otherwise ``local[...]`` inside the audit Pod."""
        return self.master.startswith("k8s://")


@dataclasses.dataclass(frozen=True)
class BackupRetention:
    """Which scheduled backups to keep: the newest ``keep_last``, and none older than ``max_age`` (None: no limit
    of that kind). One-off backups a user created are never deleted by retention."""

    keep_last: int | None = None
    max_age: datetime.timedelta | None = None


@dataclasses.dataclass(frozen=True)
class BackupS3:
    """``spec.backup.s3``: backups in S3-compatible object storage, ``s3://<bucket>/<prefix>/<backup>/`` at
    ``endpoint``; the keys are the Secret ``credentials_secret``'s ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY``; ``ca_secret`` (key ``ca.crt``): the CA that signed an HTTPS endpoint's certificate."""

    endpoint: str
    bucket: str
    prefix: str  # without leading or trailing slashes
    credentials_secret: str
    ca_secret: str | None = None

    def url(self, backup: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}/{backup}/"


@dataclasses.dataclass(frozen=True)
class BackupSpec:
    """``spec.backup``: where backups go -- the backup volume (a PVC the operator creates, kept when the cluster is
    deleted; the default) or object storage (``s3``; one of the two) --, an optional cron schedule (UTC) on which
    the operator creates ``OzoneSCMBackup`` objects, and their retention."""

    volume_size: str = "10Gi"
    storage_class_name: str | None = None  # None: the members' storage class
    schedule: str | None = None
    retention: BackupRetention = BackupRetention()
    suspend: bool = False  # no new scheduled backups (one-off backups still run)
    s3: BackupS3 | None = None  # set: backups go to object storage, not to the volume


@dataclasses.dataclass(frozen=True)
class OzoneSource:
    """``spec.bootstrap.fromOzone``: a volume holding a stopped Ozone SCM's metadata directory (its ``scm.db``, with
    ``scm/current/VERSION`` and ``scm.ratis`` beside it), mounted read-only for the primordial member's
    ``migrate from-ozone``. ``db_path``: where ``scm.db`` lies inside the volume."""

    claim_name: str
    db_path: str = "scm.db"


@dataclasses.dataclass(frozen=True)
class BootstrapSpec:
    """``spec.bootstrap``: how the ring is created. ``from_backup``: the primordial member starts with
    ``scm --restore`` from an ``OzoneSCMBackup`` of this namespace (its name) or from a directory on this cluster's
    own backup volume (a path under ``/backups/``); None: ``scm --init``. Read only while the ring is created."""

    from_backup: str | None = None
    # secure rings: the Secret holding the root CA (``ca.crt``, ``ca.key``) the restored ring keeps -- in CA mode
    # operator the old cluster's retained ``<old>-root-ca``; None: this cluster's own ``<name>-root-ca``
    root_ca_secret: str | None = None
    # the ring comes from Ozone's own SCM: the primordial member runs ``migrate from-ozone`` (docs/migration.md)
    from_ozone: OzoneSource | None = None

    @property
    def backup_path(self) -> str | None:
        """The directory form (``/backups/<dir>``), or None when ``from_backup`` names an object (or is unset)."""
        return self.from_backup if self.from_backup and self.from_backup.startswith("/") else None


_S3_ENDPOINT = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$")
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_S3_PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_BACKUP_REF = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?|/backups/[A-Za-z0-9._-]+)$")


_CRON_PROBE_START = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is not a five-field cron schedule, or None."""
    if len(expression.split()) != 5:
        return f"{expression!r} is not a cron schedule: it needs five fields (minute hour day month weekday), e.g. '0 3 * * *'"
    if not croniter.is_valid(expression):
        return f"{expression!r} is not a valid cron schedule; write it like '0 3 * * *' (every day at 03:00 UTC)"
    try:  # from a fixed date, not the clock (this module is pure); croniter searches 50 years ahead
        croniter(expression, _CRON_PROBE_START).get_next(datetime.datetime)
    except CroniterBadDateError:
        return (f"{expression!r} never fires: no date matches its day and month fields (e.g. February 30); "
                "write a day that exists, like '0 3 28 2 *'")
    return None


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """``OzoneSCMCluster.spec`` with every default applied."""

    replicas: int = 3
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: Sequence[str] = ()
    storage: StorageSpec = StorageSpec()
    security: SecuritySpec = SecuritySpec()
    ozone_site: Mapping[str, str] = dataclasses.field(default_factory=dict)
    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    scheduling: SchedulingSpec = SchedulingSpec()
    pod_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    pod_annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # merged key by key over the operator's defaults (builders.pod_security_context / container_security_context)
    pod_security_context: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    container_security_context: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    service: ServiceSpec = ServiceSpec()
    pdb_enabled: bool = True
    membership: MembershipSpec = MembershipSpec()
    audit: AuditSpec = AuditSpec()
    backup: BackupSpec = BackupSpec()
    bootstrap: BootstrapSpec = BootstrapSpec()
    paused: bool = False



def _audit_service_account(au: _Reader, default: str) -> str:
    name = au.text("serviceAccountName", default)
    if not _K8S_NAME.match(name) or len(name) > 253:
        au.problem("serviceAccountName", f"{name!r} is not a ServiceAccount name; use lowercase letters, digits, "
                                         "'-' and '.', like ozone-scm-audit")
        return default
    return name


def _audit_executors(ex: _Reader, d: AuditExecutors) -> AuditExecutors:
    memory = ex.text("memory", d.memory)
    if not _SPARK_MEMORY.match(memory):
        ex.problem("memory", f"{memory!r} is not a Spark memory size; write a number and a unit k, m, g or t, "
                             "like 1g or 512m")
        memory = d.memory
    cpu = ex.opt_str("cpuRequest")
    if cpu is not None and not (_QUANTITY.match(cpu) or re.match(r"^[0-9]+m$", cpu)):
        ex.problem("cpuRequest", f"{cpu!r} is not a CPU quantity; write it like 250m or 1")
        cpu = None
    return AuditExecutors(instances=ex.int("instances", d.instances, 1), cores=ex.int("cores", d.cores, 1),
                          memory=memory, cpu_request=cpu)


def _kerberos(kr: _Reader) -> KerberosSpec | None:
    """``spec.security.kerberos``; None (with a problem each) when the keytab Secret or the principal is missing or
    malformed."""
    secret = kr.opt_str("keytabSecret")
    principal = kr.opt_str("principal")
    key = kr.text("keytabKey", "scm.keytab")
    krb5 = kr.opt_str("krb5ConfigMap")
    if secret is None and kr.raw.get("keytabSecret") in (None, ""):  # else opt_str named the bad value
        kr.problem("keytabSecret", "must name the Secret holding the SCM's keytab (e.g. scm-keytab)")
    if principal is None:
        if kr.raw.get("principal") in (None, ""):
            kr.problem("principal", "must be the SCM's principal pattern, e.g. scm/_HOST@EXAMPLE.COM")
    elif not _PRINCIPAL.match(principal):
        kr.problem("principal", f"{principal!r} is not service/host@REALM (host may be _HOST), "
                                "e.g. scm/_HOST@EXAMPLE.COM")
        principal = None
    if not _FILE_NAME.match(key):
        kr.problem("keytabKey", f"{key!r} is not a Secret key usable as a file name (letters, digits, . _ -)")
        key = "scm.keytab"
    if secret is None or principal is None:
        return None
    return KerberosSpec(keytab_secret=secret, principal=principal, keytab_key=key, krb5_config_map=krb5)

class _Reader:
    """Reads typed fields from a raw mapping, recording a problem (and using the default) on a bad value."""

    def __init__(self, raw: Any, path: str, problems: list[SpecProblem]) -> None:
        self.path = path
        self.problems = problems
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            problems.append(SpecProblem(path or "spec", f"must be an object, got {type(raw).__name__}"))
            raw = {}
        self.raw = raw

    def _field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def problem(self, key: str, message: str) -> None:
        self.problems.append(SpecProblem(self._field(key), message))

    def sub(self, key: str) -> _Reader:
        return _Reader(self.raw.get(key), self._field(key), self.problems)

    def bool(self, key: str, default: bool) -> bool:
        v = self.raw.get(key, default)
        if isinstance(v, bool):
            return v
        self.problem(key, f"must be true or false, got {v!r}")
        return default

    def int(self, key: str, default: int, minimum: int | None = None) -> int:
        v = self.raw.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int):
            self.problem(key, f"must be an integer, got {v!r}")
            return default
        if minimum is not None and v < minimum:
            self.problem(key, f"must be at least {minimum}, got {v}")
            return default
        return v

    def text(self, key: str, default: str, choices: Sequence[str] = ()) -> str:
        v = self.raw.get(key, default)
        if not isinstance(v, str) or not v:
            self.problem(key, f"must be a non-empty string, got {v!r}")
            return default
        if choices and v not in choices:
            self.problem(key, f"must be one of {', '.join(choices)}, got {v!r}")
            return default
        return v

    def opt_str(self, key: str) -> str | None:
        v = self.raw.get(key)
        if v is None or v == "":
            return None
        if not isinstance(v, str):
            self.problem(key, f"must be a string, got {v!r}")
            return None
        return v

    def duration(self, key: str, default: str) -> datetime.timedelta:
        v = self.raw.get(key, default)
        try:
            if not isinstance(v, str):
                raise ValueError(f"{v!r} is not a duration string; write it like 30s, 10m or 1h30m")
            return parse_duration(v)
        except ValueError as exc:
            self.problem(key, str(exc))
            return parse_duration(default)

    def str_map(self, key: str) -> dict[str, str]:
        v = self.raw.get(key)
        if v is None:
            return {}
        if not isinstance(v, Mapping) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
            self.problem(key, 'must map strings to strings (quote numbers and booleans: "3", "true")')
            return {}
        return dict(v)

    def obj(self, key: str) -> dict[str, Any]:
        v = self.raw.get(key)
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            self.problem(key, f"must be an object, got {type(v).__name__}")
            return {}
        return dict(v)

    def obj_list(self, key: str) -> list[dict[str, Any]]:
        v = self.raw.get(key)
        if v is None:
            return []
        if not isinstance(v, list) or not all(isinstance(x, Mapping) for x in v):
            self.problem(key, "must be a list of objects")
            return []
        return [dict(x) for x in v]


def replicas_why(n: int) -> str:
    """Why ``n`` members is not a ring the operator runs (n not in 1, 3, 5)."""
    if n < 1:
        return "a ring needs at least one member"
    if n % 2 == 0:
        return (
            f"an SCM Raft ring needs an odd number of members ({n} members tolerate no more failures than {n - 1}, "
            f"and need more of them to agree)"
        )
    return f"rings of more than 5 members are not supported (every write would wait for {n // 2 + 1} of them)"


def unsupported(spec: ClusterSpec) -> str | None:
    """Why the operator cannot run this spec at all (it then creates nothing), or None."""
    del spec  # every valid spec is supported (CA mode scm since the operator enrols its admin identity)
    return None


def parse_spec(raw: Mapping[str, Any] | None) -> tuple[ClusterSpec, list[SpecProblem]]:
    """The spec with defaults applied, and the problems found (each field falls back to its default)."""
    problems: list[SpecProblem] = []
    r = _Reader(raw, "", problems)
    d = ClusterSpec()

    replicas = r.int("replicas", d.replicas)
    if replicas not in ALLOWED_REPLICAS:
        # kept as given: effective_spec replaces it with the last accepted size (status.replicas), or starts nothing
        problems.append(SpecProblem("replicas", f"must be 1, 3 or 5, got {replicas}: {replicas_why(replicas)}",
                                    restore=()))

    st = r.sub("storage")
    size = st.text("size", d.storage.size)
    if not _QUANTITY.match(size):
        st.problem("size", f"{size!r} is not a Kubernetes quantity; write it like 10Gi")
        size = d.storage.size
    storage = StorageSpec(size=size, storage_class_name=st.opt_str("storageClassName"),
                          reclaim_policy=st.text("reclaimPolicy", d.storage.reclaim_policy, RECLAIM_POLICIES),
                          adopt_cluster_id=st.opt_str("adoptClusterID"))

    se = r.sub("security")
    ds = d.security
    security = SecuritySpec(
        enabled=se.bool("enabled", ds.enabled),
        ca_mode=se.text("caMode", ds.ca_mode, CA_MODES),
        certificate_duration=se.duration("certificateDuration", "720h"),
        renew_before=se.duration("renewBefore", "168h"),
        root_ca_duration=se.duration("rootCADuration", "87600h"),
        kerberos=_kerberos(se.sub("kerberos")) if se.raw.get("kerberos") is not None else None,
    )
    if security.renew_before >= security.certificate_duration:
        problems.append(SpecProblem(
            "security.renewBefore",
            f"must be shorter than certificateDuration ({format_duration(security.renew_before)} >= "
            f"{format_duration(security.certificate_duration)})",
            restore=("security.renewBefore", "security.certificateDuration"),
        ))
        security = dataclasses.replace(
            security, renew_before=ds.renew_before, certificate_duration=ds.certificate_duration
        )

    ozone_site = r.str_map("ozoneSite")
    owned = sorted(k for k in ozone_site if k in OWNED_KEYS or k.startswith(OWNED_PREFIXES) or RETIRED_PORT_INFIX in k
                   or (security.kerberos is not None and k in KERBEROS_KEYS))
    if owned:
        problems.append(SpecProblem(
            "ozoneSite",
            f"may not set {', '.join(owned)}: the operator owns these keys (they define the ring's members, "
            f"identities, ports and security); they are ignored, the rest applies; use the matching spec field or "
            "remove them",
            restore=(),
        ))
        ozone_site = {k: v for k, v in ozone_site.items() if k not in owned}

    sc = r.sub("scheduling")
    affinity = sc.obj("affinity")
    scheduling = SchedulingSpec(
        node_selector=sc.str_map("nodeSelector"),
        affinity=affinity or None,
        tolerations=tuple(sc.obj_list("tolerations")),
        topology_spread_constraints=tuple(sc.obj_list("topologySpreadConstraints")),
        priority_class_name=sc.opt_str("priorityClassName"),
    )

    pm = r.sub("podMetadata")
    sv = r.sub("service")
    service = ServiceSpec(
        type=sv.text("type", d.service.type, SERVICE_TYPES),
        annotations=sv.str_map("annotations"),
        labels=sv.str_map("labels"),
    )

    ms = r.sub("membership")
    membership = MembershipSpec(
        replace_after=ms.duration("replaceAfter", "10m"),
        max_catch_up_lag=ms.int("maxCatchUpLag", d.membership.max_catch_up_lag, minimum=0),
        operation_timeout=ms.duration("operationTimeout", "5m"),
    )

    au = r.sub("audit")
    da = d.audit
    master = au.text("master", da.master)
    if not _SPARK_MASTER.match(master):
        au.problem("master", f"{master!r} is not a Spark master this audit supports; use local[*] or k8s://https://...")
        master = da.master
    audit = AuditSpec(
        enabled=au.bool("enabled", da.enabled),
        schedule=au.text("schedule", da.schedule),
        suspend=au.bool("suspend", da.suspend),
        image=au.opt_str("image"),
        master=master,
        successful_jobs_history_limit=au.int("successfulJobsHistoryLimit", da.successful_jobs_history_limit, 0),
        failed_jobs_history_limit=au.int("failedJobsHistoryLimit", da.failed_jobs_history_limit, 0),
        report_storage_size=au.text("reportStorageSize", da.report_storage_size),
        resources=au.obj("resources"),
        service_account_name=_audit_service_account(au, da.service_account_name),
        executors=_audit_executors(au.sub("executors"), da.executors),
    )

    bk = r.sub("backup")
    vol = bk.sub("volume")
    backup_size = vol.text("size", d.backup.volume_size)
    if not _QUANTITY.match(backup_size):
        vol.problem("size", f"{backup_size!r} is not a Kubernetes quantity; write it like 10Gi")
        backup_size = d.backup.volume_size
    schedule = bk.opt_str("schedule")
    if schedule is not None and (why := cron_problem(schedule)) is not None:
        bk.problem("schedule", why)
        schedule = None
    ret = bk.sub("retention")
    keep_last = ret.raw.get("keepLast")
    if keep_last is not None:
        keep_last = ret.int("keepLast", 1, minimum=1)
    max_age = None
    if ret.raw.get("maxAge") is not None:
        before = len(problems)
        max_age = ret.duration("maxAge", "0s")
        if len(problems) > before:
            max_age = None
        elif max_age.total_seconds() <= 0:
            ret.problem("maxAge", "must be longer than 0s; write it like 168h, or leave it out")
            max_age = None
    s3 = _backup_s3(bk)
    if s3 is not None and bk.raw.get("volume") is not None:
        bk.problem("s3", "spec.backup takes one target, volume or s3, not both; remove one of them (until then "
                         "backups go to the volume)")
        s3 = None
    backup = BackupSpec(
        volume_size=backup_size,
        storage_class_name=vol.opt_str("storageClassName"),
        schedule=schedule,
        retention=BackupRetention(keep_last=keep_last, max_age=max_age),
        suspend=bk.bool("suspend", d.backup.suspend),
        s3=s3,
    )

    bs = r.sub("bootstrap")
    from_backup = bs.opt_str("fromBackup")
    if from_backup is not None and (not _BACKUP_REF.match(from_backup) or ".." in from_backup):
        bs.problem("fromBackup", f"{from_backup!r} is neither the name of an OzoneSCMBackup nor a directory "
                                 "/backups/<dir> on this cluster's backup volume")
        from_backup = None
    root_ca_secret = bs.opt_str("rootCASecret")
    if root_ca_secret is not None and not _K8S_NAME.match(root_ca_secret):
        bs.problem("rootCASecret", f"{root_ca_secret!r} is not the name of a Secret")
        root_ca_secret = None
    from_ozone = _from_ozone(bs, from_backup, security.enabled)
    bootstrap = BootstrapSpec(from_backup=from_backup, root_ca_secret=root_ca_secret, from_ozone=from_ozone)

    pull_secrets = []
    for i, item in enumerate(r.obj_list("imagePullSecrets")):
        name = item.get("name")
        if isinstance(name, str) and name:
            pull_secrets.append(name)
        else:
            r.problem(f"imagePullSecrets[{i}].name", "must name a Secret")

    spec = ClusterSpec(
        replicas=replicas,
        image=r.text("image", d.image),
        image_pull_policy=r.text("imagePullPolicy", d.image_pull_policy, PULL_POLICIES),
        image_pull_secrets=tuple(pull_secrets),
        storage=storage,
        security=security,
        ozone_site=ozone_site,
        resources=r.obj("resources"),
        scheduling=scheduling,
        pod_labels=pm.str_map("labels"),
        pod_annotations=pm.str_map("annotations"),
        pod_security_context=r.obj("podSecurityContext"),
        container_security_context=r.obj("containerSecurityContext"),
        service=service,
        pdb_enabled=r.sub("podDisruptionBudget").bool("enabled", d.pdb_enabled),
        membership=membership,
        audit=audit,
        backup=backup,
        bootstrap=bootstrap,
        paused=r.bool("paused", d.paused),
    )
    return spec, problems


_OZONE_DB_PATH = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


def _from_ozone(bs: _Reader, from_backup: str | None, secure: bool) -> OzoneSource | None:
    """``spec.bootstrap.fromOzone`` read and checked (None: unset, or a problem recorded)."""
    if bs.raw.get("fromOzone") is None:
        return None
    oz = bs.sub("fromOzone")
    claim = oz.opt_str("claimName")
    db_path = oz.opt_str("dbPath") or "scm.db"
    ok = True
    if claim is None or not _K8S_NAME.match(claim):
        oz.problem("claimName", f"{claim!r} is not the name of a PersistentVolumeClaim in this namespace (the volume "
                                "holding the Ozone SCM's metadata directory)")
        ok = False
    if not _OZONE_DB_PATH.match(db_path) or ".." in db_path.split("/"):
        oz.problem("dbPath", f"{db_path!r} is not a relative path inside the volume (e.g. scm.db or metadata/scm.db)")
        ok = False
    if from_backup is not None:
        bs.problem("fromOzone", "a ring is created from a backup (fromBackup) or from Ozone's SCM (fromOzone), not "
                                "both; remove one of them")
        ok = False
    if secure:
        bs.problem("fromOzone", "migrating a secure Ozone cluster (its CA and certificates) is not supported yet; "
                                "migrate with spec.security.enabled false (docs/migration.md)")
        ok = False
    return OzoneSource(claim_name=str(claim), db_path=db_path) if ok else None


def _backup_s3(bk: _Reader) -> BackupS3 | None:
    """``spec.backup.s3`` read and checked (None: unset, or a problem recorded for every bad field)."""
    if bk.raw.get("s3") is None:
        return None
    s3 = bk.sub("s3")
    fields: dict[str, str | None] = {}
    checks = (("endpoint", _S3_ENDPOINT, "the S3 server's base URL, http(s)://host[:port]"),
              ("bucket", _S3_BUCKET, "a bucket name (3-63 lowercase letters, digits, dots, hyphens)"),
              ("prefix", _S3_PREFIX, "a key prefix like ozone/scm (no leading, trailing or double slashes)"),
              ("credentialsSecret", _K8S_NAME, "the name of a Secret in this namespace"),
              ("caSecret", _K8S_NAME, "the name of a Secret in this namespace"))
    ok = True
    for key, pattern, what in checks:
        value = s3.opt_str(key)
        if key == "prefix" and value is not None:
            value = value.strip("/")
        if value is None and key != "caSecret":
            s3.problem(key, f"is required: {what}")
            ok = False
        elif value is not None and (not pattern.match(value) or (key == "bucket" and ".." in value)):
            s3.problem(key, f"{value!r} is not {what}")
            ok = False
        fields[key] = value
    if not ok:
        return None
    return BackupS3(endpoint=str(fields["endpoint"]).rstrip("/"), bucket=str(fields["bucket"]),
                    prefix=str(fields["prefix"]), credentials_secret=str(fields["credentialsSecret"]),
                    ca_secret=fields["caSecret"])


_MISSING = object()


def _path_get(raw: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(raw, Mapping) or key not in raw:
            return _MISSING
        raw = raw[key]
    return raw


def _path_set(raw: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        child = raw.get(key)
        if not isinstance(child, dict):
            if value is _MISSING:
                return
            child = {}
            raw[key] = child
        raw = child
    if value is _MISSING:
        raw.pop(keys[-1], None)
    else:
        raw[keys[-1]] = copy.deepcopy(value)


def read_spec(
    raw: Mapping[str, Any] | None, recorded: Mapping[str, Any] | None
) -> tuple[ClusterSpec, list[SpecProblem], dict[str, Any]]:
    """``parse_spec`` that never lets an invalid value replace a recorded one: each invalid field takes its value
    from ``recorded`` (``status.appliedSpec``, the spec the operator last acted on; a field absent there was at its
    default), and its problem says so. Returns the spec, the problems, and the spec as applied (valid; to record)."""
    spec, problems = parse_spec(raw)
    applied: dict[str, Any] = copy.deepcopy(dict(raw)) if isinstance(raw, Mapping) else {}
    if not problems:
        return spec, problems, applied
    rec = recorded if isinstance(recorded, Mapping) else {}
    if not isinstance(raw, Mapping):
        applied = copy.deepcopy(dict(rec))
        out = [SpecProblem(pr.field, f"{pr.message}; keeping the last valid spec", restore=()) for pr in problems]
        return parse_spec(applied)[0], out, applied
    if "replicas" in applied and spec.replicas not in ALLOWED_REPLICAS:
        _path_set(applied, "replicas", _path_get(rec, "replicas"))  # never record an invalid size
    out = []
    for pr in problems:
        kept = []
        for path in pr.restore_paths:
            value = _path_get(rec, path)
            _path_set(applied, path, value)
            kept.append(f"{path}={value!r}" if value is not _MISSING else f"{path} at its default")
        if kept:
            pr = SpecProblem(
                pr.field, f"{pr.message}; keeping the last valid value ({', '.join(kept)})", restore=pr.restore
            )
        out.append(pr)
    result, _ = parse_spec(applied)
    if spec.replicas not in ALLOWED_REPLICAS:
        # an invalid count as given: effective_spec keeps the last accepted size (status.replicas), or starts nothing
        result = dataclasses.replace(result, replicas=spec.replicas)
    return result, out, applied


@dataclasses.dataclass(frozen=True)
class ImmutableSpec:
    """``status.immutableSpec``: the immutable fields as the cluster was created."""

    storage_class_name: str | None
    storage_size: str
    security_enabled: bool
    ca_mode: str

    @classmethod
    def of(cls, spec: ClusterSpec) -> ImmutableSpec:
        return cls(spec.storage.storage_class_name, spec.storage.size, spec.security.enabled, spec.security.ca_mode)

    @classmethod
    def from_status(cls, raw: Mapping[str, Any] | None) -> ImmutableSpec | None:
        if not raw:
            return None
        return cls(
            storage_class_name=raw.get("storageClassName") or None,
            storage_size=str(raw.get("storageSize", "10Gi")),
            security_enabled=bool(raw.get("securityEnabled", False)),
            ca_mode=str(raw.get("caMode", "operator")),
        )

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "storageSize": self.storage_size,
            "securityEnabled": self.security_enabled,
            "caMode": self.ca_mode,
        }
        if self.storage_class_name:
            out["storageClassName"] = self.storage_class_name
        return out


def effective_spec(
    spec: ClusterSpec,
    problems: Sequence[SpecProblem],
    recorded: ImmutableSpec | None,
    accepted_replicas: int | None,
) -> tuple[ClusterSpec, list[SpecProblem]]:
    """The spec the operator acts on: immutable fields pinned to ``recorded`` (status.immutableSpec), and an
    invalid replica count replaced by the last accepted one (still invalid when none was accepted: the planner
    then starts nothing). Returns it with all problems, old and new."""
    out = list(problems)
    eff = spec
    if recorded is not None:
        if spec.storage.storage_class_name != recorded.storage_class_name:
            out.append(
                SpecProblem(
                    "storage.storageClassName",
                    f"is immutable: the members' volumes use {recorded.storage_class_name or '(the default class)'}, "
                    f"not {spec.storage.storage_class_name or '(the default class)'}; set it back, or create a new "
                    "OzoneSCMCluster to move SCM metadata to another class",
                )
            )
        size = recorded.storage_size
        if quantity_bytes(spec.storage.size) >= quantity_bytes(recorded.storage_size):
            size = spec.storage.size  # growing: the volumes are expanded (where the StorageClass allows it)
        else:
            out.append(
                SpecProblem(
                    "storage.size",
                    f"cannot shrink: the members' volumes are {recorded.storage_size} and a PersistentVolumeClaim "
                    f"never gets smaller; set it back to {recorded.storage_size} or more",
                )
            )
        if spec.security.enabled != recorded.security_enabled:
            out.append(
                SpecProblem(
                    "security.enabled",
                    f"is immutable: the ring was created with security.enabled={str(recorded.security_enabled).lower()} "
                    "and Ozone does not support converting a running ring; set it back, or create a new OzoneSCMCluster",
                )
            )
        if spec.security.ca_mode != recorded.ca_mode:
            out.append(
                SpecProblem(
                    "security.caMode",
                    f"is immutable: the members' certificates were signed under caMode {recorded.ca_mode}; set it back",
                )
            )
        eff = dataclasses.replace(
            eff,
            storage=dataclasses.replace(eff.storage, size=size, storage_class_name=recorded.storage_class_name),
            security=dataclasses.replace(
                eff.security, enabled=recorded.security_enabled, ca_mode=recorded.ca_mode
            ),
        )
    if spec.replicas not in ALLOWED_REPLICAS:
        # Keep the ring at the last accepted size; with none accepted yet the planner creates nothing.
        kept = (f"keeping the ring at its last valid size, {accepted_replicas}" if accepted_replicas in ALLOWED_REPLICAS
                else "nothing is created until it is fixed")
        out = [SpecProblem(pr.field, f"{pr.message}; {kept}", restore=pr.restore) if pr.field == "replicas" else pr
               for pr in out]
        if accepted_replicas in ALLOWED_REPLICAS:
            eff = dataclasses.replace(eff, replicas=accepted_replicas)
    return eff, out

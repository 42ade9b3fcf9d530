"""One reconcile pass of one ``OzoneSCMCluster``: observe, plan, write the intent into status, act.

Called by the kopf daemon in ``handlers`` (one loop per cluster) and by tests. The order is the safety argument:

1. **observe**: the resource itself fresh (GET, not kopf's cached body: it carries the status the last pass
   wrote), its Pods, volumes, Secrets, Services, ConfigMap, PDB, audit CronJob and Jobs, backups and backup Jobs
   (by the ``ozone-scm.io/cluster``, audit and backup labels) from the watch-fed store (``effects/store.py``: kopf
   indexes, no LIST per pass), each running member's own answer (``GetScmInfo`` on its Pod IP), and the leader's
   view of the ring. The store is at least as new as every write this operator made: an object written since
   the watch last delivered it is re-read with a GET (the write's resourceVersion is the bar), so an action's
   effect is always observed by the next pass and no action is repeated for want of it; other changes (the
   kubelet's, users') arrive in watch order, as a LIST would have shown them a moment later. Every
   ``resync`` seconds (5 min) a pass LISTs instead and hides indexed objects the server no longer has (kopf keeps
   those deleted while a watch was re-listing). Without an index (unit tests, a fake client) the pass LISTs;
2. **plan** (pure, ``planner.plan``): the status to record and at most one action;
3. **write the status first**; if that fails, do nothing (the next pass starts over);
4. **act**, post an Event for the action, and return how soon the next pass should run.

Objects the operator owns are written by server-side apply under the field manager ``ozone-scm-operator``
(``KubeClient.apply``), so a field the builders stop setting is removed from the live object; Pods, volumes, Jobs
and Secrets holding generated keys are created once (``KubeClient.create``).

An operator killed between 3 and 4 finds the intent in status and the world unchanged, and the planner asks
for the same step again; killed after 4, it finds the step done (observed) and moves on: a restarted operator, or
the replica taking over the Lease (a standby runs no kopf), starts from kopf's initial listings, made after its
predecessor's last write (the predecessor stops writing before its Lease can be taken over).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, assert_never

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import (
    BACKUP_KIND,
    KIND,
    audit_status,
    backup_builders,
    builders,
    certs,
    naming,
    planner,
    podsecurity,
)
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.directives import read_directives
from ozone_scm_operator.effects.kube import Body, KubeClient, KubeError
from ozone_scm_operator.effects.scm import Endpoint, SCMAdmin, client_security
from ozone_scm_operator.effects.store import Resync, Snapshot, WatchStore
from ozone_scm_operator.effects.web import Metrics
from ozone_scm_operator.model import (
    LIVE_HEARTBEATS,
    BackupObs,
    ClusterStatus,
    ContainerObs,
    JobObs,
    Observed,
    PodObs,
    PVCObs,
    RingObs,
    RootCAObs,
    SCMObs,
    SecretObs,
    parse_time,
)
from ozone_scm_operator.spec import read_spec

LOG = logging.getLogger(__name__)

ACTION_RETRY = 2.0  # seconds before the next pass after a failed action
_KEEP = ("kopf", "audit")  # status keys written by others (kopf's bookkeeping, the audit integration)


@dataclasses.dataclass(frozen=True)
class ReconcilerSettings:
    cluster_domain: str = "cluster.local"
    poll_interval: float = 5.0
    # with the watch-fed store: one pass per cluster in this many seconds LISTs as before and corrects the store
    # (kopf keeps objects deleted while a watch re-lists; effects/store.py)
    resync: float = 300.0
    # Test failpoint (as etcd-operator's gofail ones): exit the process right before performing this action,
    # (kind, target), after its intent is in status. Set only by tests, through OZONE_SCM_OPERATOR_FAILPOINT.
    crash_before: tuple[str, str] | None = None
    # Test failpoint: block (forever, the lease still renewed) right before this action, after its intent is in status
    # and its Event is posted, so a test can SIGKILL the operator in the middle of an operation.
    pause_before: tuple[str, str] | None = None
    # Test failpoint: (kind, target or "*", path) wait until the file ``path`` exists (then remove it) right after the
    # plan's check and before the step's re-check (``Reconciler.recheck``), so a test can freeze a member in between.
    gate_before: tuple[str, str, str] | None = None


class StepHeld(Exception):
    """A step that stops a member was not performed: the leader's fresh view no longer shows a live majority."""


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def new_serial() -> int:
    """A random serial in the range SCM leaves to externally issued certificates (>= 2^63)."""
    return certs.EXTERNAL_SERIAL_FLOOR + secrets.randbits(120)


# ---------------------------------------------------------------------------------------------------------------
# raw objects -> observed values
# ---------------------------------------------------------------------------------------------------------------


def _containers(statuses: list[Body] | None, init: bool) -> tuple[ContainerObs, ...]:
    out = []
    for cs in statuses or ():
        state = cs.get("state") or {}
        last = cs.get("lastState") or {}
        waiting = state.get("waiting") or {}
        terminated = state.get("terminated") or last.get("terminated") or {}
        out.append(
            ContainerObs(
                name=str(cs.get("name", "")),
                init=init,
                ready=bool(cs.get("ready")),
                restart_count=int(cs.get("restartCount") or 0),
                waiting_reason=waiting.get("reason"),
                waiting_message=waiting.get("message"),
                terminated_reason=terminated.get("reason"),
                exit_code=terminated.get("exitCode"),
                terminated_message=(terminated.get("message") or "").strip()[-300:] or None,
            )
        )
    return tuple(out)


def controller_uid(meta: Body) -> str | None:
    return next((r.get("uid") for r in meta.get("ownerReferences") or () if r.get("controller")), None)


def pod_obs(pod: Body) -> PodObs:
    meta = pod.get("metadata") or {}
    st = pod.get("status") or {}
    ann = meta.get("annotations") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or ())
    return PodObs(
        name=meta["name"],
        phase=st.get("phase") or "Pending",
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        revision=ann.get(naming.ANN_REVISION),
        init_mode=ann.get(naming.ANN_INIT_MODE),
        pod_ip=st.get("podIP") or None,
        created_at=parse_time(meta.get("creationTimestamp")),
        containers=_containers(st.get("initContainerStatuses"), True) + _containers(st.get("containerStatuses"), False),
        controller_uid=controller_uid(meta),
    )


def pvc_obs(pvc: Body) -> PVCObs:
    meta = pvc.get("metadata") or {}
    return PVCObs(
        name=meta["name"],
        phase=(pvc.get("status") or {}).get("phase") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        storage_class_name=(pvc.get("spec") or {}).get("storageClassName"),
        controller_uid=controller_uid(meta),
        cluster_id=(meta.get("labels") or {}).get(naming.LABEL_CLUSTER_ID),
        size=(((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage"),
    )


def secret_obs(secret: Body) -> SecretObs:
    meta = secret.get("metadata") or {}
    ann = meta.get("annotations") or {}
    return SecretObs(
        name=meta["name"],
        content_hash=ann.get(naming.ANN_CONTENT_HASH),
        certificate_serial=ann.get(naming.ANN_CERT_SERIAL),
        certificate_not_after=parse_time(ann.get(naming.ANN_CERT_NOT_AFTER)),
        root_fingerprint=ann.get(naming.ANN_ROOT_FINGERPRINT),
        revoked=ann.get(naming.ANN_CERT_REVOKED) == "true",
        public_key=ann.get(naming.ANN_PUBLIC_KEY),
        certificate_not_before=parse_time(ann.get(naming.ANN_CERT_NOT_BEFORE)),
        role_bound=ann.get(naming.ANN_ROLE_BOUND) == "true",
        controller_uid=controller_uid(meta),
    )


def root_ca_obs(name: str, secret: Body | None) -> RootCAObs | None:
    """The root CA a secure restore would take from Secret ``name`` (None: no such Secret): the fingerprint of its
    certificate as read from ``ca.crt`` (not from an annotation), and whether its key matches it."""
    if secret is None:
        return None
    data = secret.get("data") or {}
    cert_pem = certs.decode_secret_field(data, certs.ROOT_CERT)
    key_pem = certs.decode_secret_field(data, certs.ROOT_KEY)
    if cert_pem is None:
        return RootCAObs(name, problem=f"it has no {certs.ROOT_CERT}")
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return RootCAObs(name, problem=f"its {certs.ROOT_CERT} is not a PEM certificate")
    fp = certs.fingerprint(cert)
    if key_pem is None:
        return RootCAObs(name, fp, problem=f"it has no {certs.ROOT_KEY} (the root CA's private key)")
    try:
        certs.load_pair(cert_pem, key_pem)
    except ValueError as exc:
        return RootCAObs(name, fp, has_key=True, problem=str(exc))
    return RootCAObs(name, fp, has_key=True)


def backup_obs(body: Body) -> BackupObs:
    meta = body.get("metadata") or {}
    st = body.get("status") or {}
    return BackupObs(
        name=meta["name"],
        uid=meta.get("uid") or "",
        cluster=str((body.get("spec") or {}).get("cluster") or ""),
        created_at=parse_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        scheduled_at=parse_time((meta.get("annotations") or {}).get(naming.ANN_SCHEDULED_AT)),
        phase=st.get("phase") or None,
        message=st.get("message") or None,
        started_at=parse_time(st.get("startedAt")),
        completed_at=parse_time(st.get("completedAt")),
        status=dict(st),
    )


def _terminated(pod: Body) -> list[tuple[str, int | None, str]]:
    """(container, exit code, termination message) of every terminated container of a Pod, init ones first."""
    st = pod.get("status") or {}
    out = []
    for cs in [*(st.get("initContainerStatuses") or ()), *(st.get("containerStatuses") or ())]:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term:
            out.append((str(cs.get("name", "")), term.get("exitCode"), str(term.get("message") or "")))
    return out


def job_obs(job: Body, pods: list[Body]) -> JobObs | None:
    """A backup or clean-up Job as the backup planner sees it (None: not one of those)."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    backup = labels.get(naming.LABEL_BACKUP_NAME)
    if not backup:
        return None
    result, finished, message = None, None, None
    st = job.get("status") or {}
    for c in st.get("conditions") or ():
        if c.get("status") != "True":
            continue
        if c.get("type") == "Complete":
            result, finished = "Succeeded", parse_time(st.get("completionTime") or c.get("lastTransitionTime"))
        elif c.get("type") == "Failed":
            result, finished = "Failed", parse_time(c.get("lastTransitionTime"))
            message = c.get("message") or c.get("reason")
    if result is not None:
        mine = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(
            audit_status.JOB_NAME_LABEL, ((p.get("metadata") or {}).get("labels") or {}).get("job-name")) == meta["name"]]
        for pod in mine:
            ended = _terminated(pod)
            failed = [m for _, code, m in ended if code not in (None, 0) and m]
            if result == "Failed" and failed:
                message = failed[0]
            elif result == "Succeeded" and ended and ended[-1][2]:
                message = ended[-1][2]
    return JobObs(name=meta["name"], backup=backup, purpose=labels.get(backup_builders.LABEL_PURPOSE, ""),
                  result=result, finished_at=finished, message=message)


_UNCHANGED = object()


def merge_patch_diff(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``, or ``_UNCHANGED``: objects recursively, keys
    that disappear (or become None) nulled -- a merge patch merges nested objects, so a stale nested key would
    otherwise survive -- and everything else replaced whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        patch: Body = {}
        for k, v in new.items():
            if k not in old:
                if v is not None:
                    patch[k] = v
                continue
            d = merge_patch_diff(old[k], v)
            if d is not _UNCHANGED:
                patch[k] = d
        for k in old:
            if k not in new:
                patch[k] = None
        return patch if patch else _UNCHANGED
    return _UNCHANGED if old == new else new


def status_patch(old: Body | None, new: Body) -> Body | None:
    """The merge patch turning the stored status into ``new`` (keys owned by others are left alone), or None."""
    old = {k: v for k, v in (old or {}).items() if k not in _KEEP}
    result = merge_patch_diff(old, new)
    return None if result is _UNCHANGED else dict(result)


# ---------------------------------------------------------------------------------------------------------------
# the reconciler
# ---------------------------------------------------------------------------------------------------------------


class Reconciler:
    def __init__(
        self,
        kube: KubeClient,
        scm: SCMAdmin,
        *,
        settings: ReconcilerSettings = ReconcilerSettings(),
        metrics: Metrics | None = None,
        now: Callable[[], datetime.datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        keygen: Callable[[], ec.EllipticCurvePrivateKey] = new_key,
        serial: Callable[[], int] = new_serial,
        fence: Callable[[], bool] | None = None,
        store: WatchStore | None = None,
    ) -> None:
        self.kube = kube
        # the watch-fed store (kopf's indexes, attached by the handlers); None or not yet attached: LIST per pass
        self.store = store
        # leader election: false once this replica may no longer act (checked before every write; None: always may)
        self.fence = fence
        self.scm = scm
        self.settings = settings
        self.metrics = metrics or Metrics.create()
        self.now = now
        self.monotonic = monotonic
        self.sleep = sleep
        self.keygen = keygen
        self.serial = serial
        self._security: dict[str, tuple[str, Any]] = {}  # cluster key -> (certificate serial, client security)
        self._resynced: dict[str, float] = {}  # cluster key -> when a pass last LISTed (monotonic)

    # ---- observe ----
    async def client_security(self, ref: ClusterRef, secure: bool, observed: SecretObs | None = None) -> Any:
        """The operator's TLS identity for this cluster (None without security), from its client Secret. With the
        Secret as just observed (``observed``, no payload) carrying the serial of the identity already loaded, that
        identity without reading the Secret again."""
        key = f"{ref.namespace}/{ref.name}"
        if not secure:
            return None
        cached = self._security.get(key)
        if cached is not None and observed is not None and observed.certificate_serial \
                and cached[0] == observed.certificate_serial:
            return cached[1]
        secret = await self.kube.get("Secret", ref.namespace, naming.operator_client_secret_name(ref.name))
        data = (secret or {}).get("data") or {}
        serial = ((secret or {}).get("metadata", {}).get("annotations") or {}).get(naming.ANN_CERT_SERIAL, "")
        if builders.TLS_CERT not in data:
            # not issued yet: CA mode operator starts no SCM before it is; CA mode scm holds only the key until the
            # primordial signed it
            return None
        if cached is not None and cached[0] == serial:
            return cached[1]
        chain = x509.load_pem_x509_certificates(base64.b64decode(data[builders.TLS_CERT]))
        root = x509.load_pem_x509_certificate(base64.b64decode(data[builders.TLS_CA]))
        priv = serialization.load_pem_private_key(base64.b64decode(data[builders.TLS_KEY]), password=None)
        assert isinstance(priv, ec.EllipticCurvePrivateKey)
        security = client_security([c for c in chain if c != root], priv, root)
        self._security[key] = (serial, security)
        return security

    async def observe(self, ref: ClusterRef, status: ClusterStatus, secure: bool = False,
                      want_size: str | None = None) -> Observed:
        labels = {naming.LABEL_CLUSTER: ref.name}
        ns = ref.namespace
        src: KubeClient | Snapshot | Resync = self.kube
        if self.store is not None and self.store.ready:
            key, mono = f"{ns}/{ref.name}", time.monotonic()
            if mono - self._resynced.setdefault(key, mono) >= self.settings.resync:
                self._resynced[key] = mono
                src = Resync(self.store)
                self.metrics.observation_reads.labels("resync").inc()
            else:
                src = snapshot = await self.store.snapshot(ns)
                if snapshot.fresh_reads:
                    self.metrics.observation_reads.labels("fresh").inc(snapshot.fresh_reads)
        pods = {p.name: p for p in map(pod_obs, await src.list("Pod", ns, labels))}
        pvcs = {p.name: p for p in map(pvc_obs, await src.list("PersistentVolumeClaim", ns, labels))}
        secrets = {s.name: s for s in map(secret_obs, await src.list("Secret", ns, labels))}
        root = await src.get("Secret", ns, naming.root_ca_secret_name(ref.name))
        if root is not None:
            secrets[root["metadata"]["name"]] = secret_obs(root)
        children: dict[tuple[str, str], str | None] = {}
        owners: dict[tuple[str, str], str | None] = {}
        for kind in ("ConfigMap", "Service", "PodDisruptionBudget"):
            for obj in await src.list(kind, ns, labels):
                meta = obj["metadata"]
                children[(kind, meta["name"])] = (meta.get("annotations") or {}).get(naming.ANN_CONTENT_HASH)
                owners[(kind, meta["name"])] = controller_uid(meta)
        # the scheduled audit's objects carry the audit label, never LABEL_CLUSTER (see naming.audit_labels)
        audit_labels = {naming.LABEL_AUDIT: ref.name}
        cronjobs = await src.list("CronJob", ns, audit_labels)
        for kind, objs in (("CronJob", cronjobs), ("PersistentVolumeClaim", await src.list(
                "PersistentVolumeClaim", ns, audit_labels))):
            for obj in objs:
                meta = obj["metadata"]
                children[(kind, meta["name"])] = (meta.get("annotations") or {}).get(naming.ANN_CONTENT_HASH)
                owners[(kind, meta["name"])] = controller_uid(meta)
        audit = None
        if cronjobs or status.audit:
            jobs = await src.list("Job", ns, audit_labels)
            audit_pods = await src.list("Pod", ns, audit_labels) if jobs else []
            audit = audit_status.audit_status(cronjobs[0] if cronjobs else None, jobs, audit_pods)
        backups, backup_jobs = await self._backups(ref, children, owners, src)
        members = {m.name for m in status.members}
        # with no member recorded yet, any running Pod of this cluster's name may be a ring to adopt (planner)
        endpoints = {
            n: Endpoint(n, p.pod_ip, ref.host(n)) for n, p in pods.items()
            if p.pod_ip and p.running and (n in members or (not members and naming.member_index(ref.name, n) is not None))
        }
        security = await self.client_security(ref, secure, secrets.get(naming.operator_client_secret_name(ref.name)))
        scms = await self.scm.probe_all(endpoints, security)
        ring = await self._ring(scms, endpoints, security)
        return Observed(
            now=self.now(), pods=pods, pvcs=pvcs, scms=scms, ring=ring, children=children, child_owners=owners,
            secrets=secrets,
            audit=audit, pod_security=await self._pod_security(ns),
            volume_expansion=await self._volume_expansion(pvcs, want_size),
            backups=backups, backup_jobs=backup_jobs,
        )

    async def _backups(
        self, ref: ClusterRef, children: dict[tuple[str, str], str | None], owners: dict[tuple[str, str], str | None],
        src: KubeClient | Snapshot | Resync,
    ) -> tuple[dict[str, BackupObs], dict[str, JobObs]]:
        """This cluster's OzoneSCMBackups (``spec.cluster``), their Jobs (with their Pods' termination messages),
        and the backup volume (into ``children`` and ``owners``)."""
        ns = ref.namespace
        labels = {naming.LABEL_BACKUP: ref.name}
        for pvc in await src.list("PersistentVolumeClaim", ns, labels):
            children[("PersistentVolumeClaim", pvc["metadata"]["name"])] = None
            owners[("PersistentVolumeClaim", pvc["metadata"]["name"])] = controller_uid(pvc["metadata"])
        raw = [b for b in await src.list(BACKUP_KIND, ns) if (b.get("spec") or {}).get("cluster") == ref.name]
        backups = {b.name: b for b in map(backup_obs, raw)}
        jobs: dict[str, JobObs] = {}
        raw_jobs = await src.list("Job", ns, labels)
        if raw_jobs:
            pods = await src.list("Pod", ns, labels)
            for job in raw_jobs:
                obs = job_obs(job, pods)
                if obs is not None:
                    jobs[obs.name] = obs
        return backups, jobs

    async def _volume_expansion(self, pvcs: Mapping[str, PVCObs], want_size: str | None) -> bool | None:
        """Whether the members' StorageClass allows expansion; read only while a member volume is smaller than
        spec.storage.size asks (None: no such volume, the class is unknown or the operator may not read it)."""
        classes = {p.storage_class_name for p in pvcs.values() if p.size and want_size and p.size != want_size
                   and p.name.endswith("-data")}
        cls = next(iter(sorted(c for c in classes if c)), None)
        if cls is None:
            return None
        try:
            obj = await self.kube.get("StorageClass", "", cls)
        except KubeError as exc:
            LOG.debug("cannot read StorageClass %s: %s", cls, exc)
            return None
        return None if obj is None else bool(obj.get("allowVolumeExpansion"))

    async def _pod_security(self, namespace: str) -> str | None:
        """The Pod Security level the namespace enforces, or None when the operator may not read Namespaces (the
        API server's admission still refuses what breaks it; the operator then cannot say why beforehand)."""
        try:
            obj = await self.kube.get("Namespace", "", namespace)
        except KubeError as exc:
            LOG.debug("cannot read Namespace %s: %s", namespace, exc)
            return None
        if obj is None:
            return None
        return podsecurity.enforced_level((obj.get("metadata") or {}).get("labels"))

    async def _ring(self, scms: Mapping[str, SCMObs], endpoints: Mapping[str, Endpoint], security: Any) -> RingObs | None:
        leaders = sorted((s for s in scms.values() if s.is_leader), key=lambda s: -s.term)
        candidates = [s.member for s in leaders]
        if not candidates:
            # a member that knows the leader points at it (the leader itself may not have answered in time)
            by_id = {s.scm_id: s.member for s in scms.values()}
            candidates = [by_id[s.leader_id] for s in scms.values() if s.leader_id in by_id]
        for member in candidates:
            ep = endpoints.get(member)
            if ep is not None:
                ring = await self.scm.ring(ep, security)
                if ring is not None:
                    return ring
        return None

    # ---- one pass ----
    async def reconcile(self, namespace: str, name: str) -> float | None:
        """One pass; returns seconds until the next one should run (None: the resource is gone)."""
        started = time.monotonic()
        result = "error"
        try:
            delay = await self._reconcile(namespace, name)
            result = "ok"
            return delay
        finally:
            self.metrics.reconciles.labels(result).inc()
            self.metrics.reconcile_seconds.observe(time.monotonic() - started)

    async def _reconcile(self, namespace: str, name: str) -> float | None:
        body = await self.kube.get_cluster(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        meta = body["metadata"]
        ref = ClusterRef(name=name, namespace=namespace, uid=meta.get("uid", ""), cluster_domain=self.settings.cluster_domain)
        status = ClusterStatus.from_raw(body.get("status"))
        spec, problems, applied = read_spec(body.get("spec"), status.applied_spec)
        obs = await self.observe(ref, status, secure=spec.security.enabled, want_size=spec.storage.size)
        recover_from = (meta.get("annotations") or {}).get(naming.ANN_RECOVER_FROM)
        if recover_from:
            obs = dataclasses.replace(obs, recover_from=str(recover_from).strip())
        source = spec.bootstrap.from_backup
        if source and not spec.bootstrap.backup_path and status.cluster_id is None:
            raw = await self.kube.get(BACKUP_KIND, namespace, source)
            if raw is not None:
                obs = dataclasses.replace(obs, restore_backup=backup_obs(raw))
        if source and status.cluster_id is None and spec.security.operator_ca:
            root_name = spec.bootstrap.root_ca_secret or naming.root_ca_secret_name(name)
            obs = dataclasses.replace(
                obs, restore_root_ca=root_ca_obs(root_name, await self.kube.get("Secret", namespace, root_name))
            )
        plan = planner.plan(
            ref, spec, problems, meta.get("generation"), status, obs,
            planner.Settings(poll_interval=self.settings.poll_interval), applied_spec=applied,
            directives=read_directives(meta.get("annotations")),
        )
        new_raw = plan.status.to_raw()
        patch = status_patch(body.get("status"), new_raw)
        if not self._may_act(namespace, name, "writing status"):
            return ACTION_RETRY
        if patch is not None:
            await self.kube.patch_cluster_status(namespace, name, patch)  # the intent, before any action
        self._record_metrics(ref, plan.status)
        for event in plan.events:
            await self.kube.event(body, event.type, event.reason, event.message, obs.now)
        action = plan.action
        if action is None:
            return plan.requeue_after
        LOG.info("%s/%s: %s %s: %s", namespace, name, action.kind, action.target, action.message)
        if not self._may_act(namespace, name, f"{action.kind} {action.target}"):
            return ACTION_RETRY
        try:
            await self.recheck(ref, action, obs, plan.status)
        except StepHeld as held:
            LOG.warning("%s/%s: %s %s held: %s", namespace, name, action.kind, action.target, held)
            await self.kube.event(body, "Warning", "WaitingForQuorum", f"{action.kind} {action.target} held: {held}",
                                  self.now(), action=action.kind)
            return ACTION_RETRY
        await self.kube.event(body, action.event_type, action.reason, action.message, obs.now, action=action.kind)
        if action.subject is not None:
            subject = {"apiVersion": action.subject["apiVersion"], "kind": action.subject["kind"],
                       "metadata": {k: action.subject[k] for k in ("name", "namespace", "uid")}}
            await self.kube.event(subject, action.event_type, action.reason, action.message, obs.now,
                                  action=action.kind)
        try:
            await self.act(ref, action, obs, plan.status)
        except Exception as exc:
            self.metrics.action_errors.labels(action.kind).inc()
            LOG.warning("%s/%s: %s %s failed: %s", namespace, name, action.kind, action.target, exc)
            await self.kube.event(
                body, "Warning", "ActionFailed", f"{action.kind} {action.target} failed: {exc}", self.now(),
                action=action.kind,
            )
            return ACTION_RETRY
        self.metrics.actions.labels(action.kind).inc()
        return plan.requeue_after

    def _may_act(self, namespace: str, name: str, what: str) -> bool:
        if self.fence is None or self.fence():
            return True
        LOG.warning("%s/%s: not %s: this replica does not hold the leader-election Lease", namespace, name, what)
        return False

    def _record_metrics(self, ref: ClusterRef, st: ClusterStatus) -> None:
        m = self.metrics
        labels = (ref.namespace, ref.name)
        ready = st.condition("Ready")
        m.cluster_ready.labels(*labels).set(1 if ready is not None and ready.status == "True" else 0)
        m.members_ready.labels(*labels).set(sum(1 for x in st.members if x.ready))
        m.members_desired.labels(*labels).set(st.replicas or 0)
        for x in st.members:
            if x.lag is not None:
                m.member_lag.labels(*labels, x.name).set(x.lag)
            if x.certificate_expiry is not None:
                m.certificate_expiry.labels(*labels, x.name).set(x.certificate_expiry.timestamp())
        findings = ((st.audit or {}).get("lastSummary") or {}).get("findings")
        if isinstance(findings, int) and not isinstance(findings, bool):
            m.audit_findings.labels(*labels).set(findings)
        backup = st.backup or {}
        last = parse_time(backup.get("lastBackupTime"))
        if last is not None:
            m.backup_last_completed.labels(*labels).set(last.timestamp())
        deadline = parse_time(backup.get("deadline"))
        if deadline is not None:
            m.backup_deadline.labels(*labels).set(deadline.timestamp())
        else:
            with contextlib.suppress(KeyError):  # never set for this cluster
                m.backup_deadline.remove(*labels)

    # ---- act ----
    async def recheck(self, ref: ClusterRef, a: planner.Action, obs: Observed, st: ClusterStatus) -> None:
        """Right before a step that stops a member or takes it out of the ring (a roll's restart, a decommission),
        check its ``guard`` again on fresh reads of the leader's view, not on the pass's observation: poll the
        leader (every half heartbeat interval, for at most the guard's live bound, a few heartbeat intervals) until
        the voters the plan counted have answered it since this re-check began. Raises ``StepHeld`` when they have
        not (a member frozen, crashed or cut off after the plan's check), when the leader does not answer or no
        longer leads; the step is then not performed and the next pass plans again."""
        gate = self.settings.gate_before
        if gate is not None and gate[0] == a.kind and gate[1] in ("*", a.target):
            LOG.error("failpoint: waiting for %s before re-checking %s %s", gate[2], a.kind, a.target)
            while not os.path.exists(gate[2]):
                await self.sleep(0.01)
            os.remove(gate[2])  # one step per file: the next such step waits for the file again
        guard = a.guard if isinstance(a, planner.DeletePod | planner.Decommission) else None
        if guard is None:
            return
        pod = obs.pods.get(guard.leader)
        if pod is None or not pod.pod_ip:
            raise StepHeld(f"the leader {guard.leader} has no Pod IP to read the ring from")
        leader = Endpoint(guard.leader, pod.pod_ip, ref.host(guard.leader))
        security = await self.client_security(ref, bool(st.immutable_spec and st.immutable_spec.get("securityEnabled")))
        bound = guard.live_bound or 0.0
        start = self.monotonic()
        while True:
            sent = self.monotonic()
            ring = await self.scm.ring(leader, security)
            why = guard.why_not(ring, sent - start)
            if why is None:
                return
            if ring is None or ring.leader_scm_id != guard.leader_scm_id or self.monotonic() - start >= bound:
                raise StepHeld(why)
            await self.sleep(bound / (2 * LIVE_HEARTBEATS))

    async def act(self, ref: ClusterRef, a: planner.Action, obs: Observed, st: ClusterStatus) -> None:
        """Perform one step, by its class (``planner.actions``); a step not handled here fails type checking."""
        ns = ref.namespace
        k = a.kind
        if self.settings.crash_before == (k, a.target):
            LOG.error("failpoint: exiting before %s %s (its intent is in status)", k, a.target)
            logging.shutdown()
            os._exit(86)
        if self.settings.pause_before == (k, a.target):
            LOG.error("failpoint: pausing before %s %s (its intent is in status)", k, a.target)
            await asyncio.Event().wait()
        if not self._may_act(ref.namespace, ref.name, f"{k} {a.target}"):
            raise RuntimeError("this replica no longer holds the leader-election Lease")
        match a:
            case planner.Apply(body=body):
                await self.kube.apply(body)
            case (planner.CreatePod(body=body) | planner.CreatePVC(body=body) | planner.CreateJob(body=body)
                  | planner.CreateBackup(body=body)):
                await self._create(body)
            case planner.DeleteObject(object_kind=kind):
                await self.kube.delete(kind, ns, a.target)
            case planner.DeletePod():  # a roll's restart was re-checked right before (recheck)
                await self.kube.delete("Pod", ns, a.target)
            case planner.DeletePVC():
                await self.kube.delete("PersistentVolumeClaim", ns, a.target)
            case planner.RetainPVC():
                await self.kube.merge_patch(
                    "PersistentVolumeClaim", ns, a.target,
                    {"metadata": {
                        "ownerReferences": None,
                        "labels": {naming.LABEL_CLUSTER: None, f"{naming.LABEL_CLUSTER}-retained": ref.name},
                        "annotations": {f"{naming.LABEL_CLUSTER}-retained-at": obs.now.strftime("%Y-%m-%dT%H:%M:%SZ")},
                    }},
                )
            case planner.ReleasePVC():
                obj = await self.kube.get("PersistentVolumeClaim", ns, a.target)
                if obj is None:
                    raise RuntimeError(f"PersistentVolumeClaim {a.target} is gone")
                refs = [r for r in obj["metadata"].get("ownerReferences") or () if r.get("uid") != ref.uid]
                await self.kube.merge_patch("PersistentVolumeClaim", ns, a.target, {"metadata": {
                    "ownerReferences": refs or None,
                    "resourceVersion": obj["metadata"].get("resourceVersion"),
                }})
            case planner.LabelPVC(cluster_id=cluster_id):
                await self.kube.merge_patch("PersistentVolumeClaim", ns, a.target,
                                            {"metadata": {"labels": {naming.LABEL_CLUSTER_ID: cluster_id}}})
            case planner.ExpandPVC(size=size):
                await self.kube.merge_patch("PersistentVolumeClaim", ns, a.target,
                                            {"spec": {"resources": {"requests": {"storage": size}}}})
            case planner.Adopt(object_kind=kind):
                obj = await self.kube.get(kind, ns, a.target)
                if obj is None:
                    raise RuntimeError(f"{kind} {a.target} is gone")
                refs = [r for r in obj["metadata"].get("ownerReferences") or () if not r.get("controller")]
                await self.kube.merge_patch(kind, ns, a.target, {"metadata": {
                    "ownerReferences": [*refs, ref.owner_reference()],
                    "resourceVersion": obj["metadata"].get("resourceVersion"),
                }})
            case planner.DeleteSecret():
                await self.kube.delete("Secret", ns, a.target)
            case planner.ClearAnnotation(key=annotation) | planner.RemoveAnnotation(key=annotation):
                await self.kube.merge_patch(KIND, ns, ref.name, {"metadata": {"annotations": {annotation: None}}})
            case planner.CreateRootCA(copy_from=source_name, fingerprint=fingerprint) if source_name:
                # a secure restore: the old cluster's root CA, the one the backup records (checked again here)
                source = await self.kube.get("Secret", ns, source_name)
                data: dict[str, Any] = (source or {}).get("data") or {}
                if certs.ROOT_CERT not in data or certs.ROOT_KEY not in data:
                    raise RuntimeError(f"Secret {source_name} has no root CA ({certs.ROOT_CERT}, {certs.ROOT_KEY})")
                root = certs.load_pair(base64.b64decode(data[certs.ROOT_CERT]), base64.b64decode(data[certs.ROOT_KEY]))
                if root.fingerprint != fingerprint:
                    raise RuntimeError(f"Secret {source_name} changed under the restore (root CA {root.fingerprint}, "
                                       f"expected {fingerprint})")
                await self._create(certs.root_ca_secret(ref, root))
            case planner.CreateRootCA(duration=duration):
                root = certs.create_root_ca(
                    self.keygen(), cluster=ref.name, namespace=ns, now=self.now(), duration=duration,
                    serial=self.serial(),
                )
                await self._create(certs.root_ca_secret(ref, root))
            case planner.IssueMemberCertificate(member=member, duration=duration):
                root = await self._root_pair(ref)
                pair = certs.issue_member_certificate(
                    root, self.keygen(), ref=ref, member=member, now=self.now(), duration=duration,
                    serial=self.serial(),
                )
                await self.kube.apply(certs.member_tls_secret(ref, member, pair, root.certificate))
            case planner.IssueClientCertificate(duration=duration):
                root = await self._root_pair(ref)
                pair = certs.issue_client_certificate(
                    root, self.keygen(), ref=ref, now=self.now(), duration=duration, serial=self.serial()
                )
                await self.kube.apply(certs.client_tls_secret(ref, pair, root.certificate))
            case planner.CreateEnrollmentSecret(scm=scm):
                scm_secret = secrets.token_hex(32) if scm else None
                await self._create(builders.build_enrollment_secret(ref, secrets.token_hex(32), scm_secret))
            case planner.CreateClientKey():
                await self._create(certs.client_key_secret(ref, self.keygen()))
            case planner.CreateAdminCSR():
                key = await self._client_key(ref)
                await self._create(certs.admin_csr_secret(ref, certs.client_csr(key)))
            case planner.FetchClientCertificate(member=member):
                key = await self._client_key(ref)
                pod = obs.pods.get(member)
                if pod is None or not pod.pod_ip:
                    raise RuntimeError(f"Pod {member} has no IP yet")
                enrollment = await self.kube.get("Secret", ns, naming.enrollment_secret_name(ref.name))
                proof_secret = certs.decode_secret_field((enrollment or {}).get("data"), naming.ENROLLMENT_SCM)
                if proof_secret is None:
                    raise RuntimeError(f"Secret {naming.enrollment_secret_name(ref.name)} has no {naming.ENROLLMENT_SCM}")
                chain, scm_root = await self.scm.fetch_client_certificate(
                    Endpoint(member, pod.pod_ip, ref.host(member)), proof_secret, certs.public_key_sha256(key)
                )
                await self.kube.apply(certs.client_tls_secret_from_scm(ref, key, chain, scm_root))
            case planner.RenewClientCertificate():
                security = await self.client_security(ref, True)
                key = self.keygen()
                csr_pem = certs.client_csr(key).public_bytes(serialization.Encoding.PEM).decode("ascii")
                chain, scm_root = await self.scm.renew_client_certificate(self._endpoints(ref, obs, st), csr_pem, security)
                await self.kube.apply(certs.client_tls_secret_from_scm(ref, key, chain, scm_root))
            case planner.TransferLeadership(to_scm_id=to_scm_id):
                if to_scm_id is None:
                    raise RuntimeError(f"{a.to} has no scmId to transfer leadership to")
                security = await self.client_security(ref, bool(st.immutable_spec and st.immutable_spec.get("securityEnabled")))
                await self.scm.transfer(self._endpoints(ref, obs, st), to_scm_id, security)
            case planner.Decommission(scm_id=scm_id):
                security = await self.client_security(ref, bool(st.immutable_spec and st.immutable_spec.get("securityEnabled")))
                await self.scm.decommission(self._endpoints(ref, obs, st), scm_id, security)
            case planner.RevokeCertificate(serial=serial, revocation_reason=reason):
                security = await self.client_security(ref, True)
                await self.scm.revoke(self._endpoints(ref, obs, st), [serial], reason, security)
                # the observed proof that this step is done (a pass that finds it moves on to deleting the Secret)
                await self.kube.merge_patch(
                    "Secret", ns, a.target, {"metadata": {"annotations": {naming.ANN_CERT_REVOKED: "true"}}}
                )
            case planner.UpdateBackup(status=status, finalizers=finalizers):
                if finalizers is not None:
                    obj = await self.kube.get(BACKUP_KIND, ns, a.target)
                    if obj is None:
                        raise RuntimeError(f"{BACKUP_KIND} {a.target} is gone")
                    await self.kube.merge_patch(BACKUP_KIND, ns, a.target, {"metadata": {
                        "finalizers": list(finalizers) or None,
                        "resourceVersion": obj["metadata"].get("resourceVersion"),
                    }})
                if status:
                    await self.kube.merge_patch(BACKUP_KIND, ns, a.target, {"status": status}, subresource="status")
            case planner.DeleteBackup():
                await self.kube.delete(BACKUP_KIND, ns, a.target)
            case _:
                assert_never(a)

    async def _create(self, body: Body) -> None:
        try:
            await self.kube.create(body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            LOG.info("%s %s already exists", body["kind"], body["metadata"]["name"])

    async def _client_key(self, ref: ClusterRef) -> ec.EllipticCurvePrivateKey:
        name = naming.operator_client_secret_name(ref.name)
        secret = await self.kube.get("Secret", ref.namespace, name)
        pem = certs.decode_secret_field((secret or {}).get("data"), builders.TLS_KEY)
        if pem is None:
            raise RuntimeError(f"Secret {name} has no {builders.TLS_KEY}")
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise RuntimeError(f"Secret {name}: {builders.TLS_KEY} is not an EC private key")
        return key

    async def _root_pair(self, ref: ClusterRef) -> certs.KeyPair:
        secret = await self.kube.get("Secret", ref.namespace, naming.root_ca_secret_name(ref.name))
        data: dict[str, Any] = (secret or {}).get("data") or {}
        if certs.ROOT_CERT not in data or certs.ROOT_KEY not in data:
            raise RuntimeError(f"Secret {naming.root_ca_secret_name(ref.name)} has no root CA ({certs.ROOT_CERT}, {certs.ROOT_KEY})")
        return certs.load_pair(base64.b64decode(data[certs.ROOT_CERT]), base64.b64decode(data[certs.ROOT_KEY]))

    @staticmethod
    def _endpoints(ref: ClusterRef, obs: Observed, st: ClusterStatus) -> list[Endpoint]:
        """The members that answered, the leader first (the admin client follows NotLeader hints anyway)."""
        leader = st.leader
        names = sorted(obs.scms, key=lambda n: n != leader)
        return [Endpoint(n, ip, ref.host(n)) for n in names if (p := obs.pods.get(n)) is not None and (ip := p.pod_ip)]


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
   those deleted while a watch was re-listing). Without an index (unit tests, a fake client) the pass LISTs.
   ``observe`` is the pass's only reader: it also keeps what the steps write from (``observations.Reads``: each
   object's metadata, and the payload of the Secrets a security step signs or proves with, GET once per
   resourceVersion since the store keeps no Secret payload). The raw objects become values in ``observations``;
2. **plan** (pure, ``planner.plan``): the status to record and at most one action;
3. **write the status first**; if that fails, do nothing (the next pass starts over);
4. **act**, post an Event for the action, and return how soon the next pass should run. ``act`` builds no body: it
   applies, creates, deletes or merge-patches what the plan, ``patches`` and ``certs`` built, and makes the
   step's SCM call. A patch that replaces a list carries the observed resourceVersion (409 if the object moved).

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
import contextlib
import dataclasses
import datetime
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, assert_never

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import (
    BACKUP_KIND,
    audit_status,
    builders,
    certs,
    naming,
    observations,
    patches,
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
    JobObs,
    Observed,
    PVCObs,
    RingObs,
    SCMObs,
    SecretObs,
    parse_time,
)
from ozone_scm_operator.spec import ClusterSpec, SpecProblem, read_spec

LOG = logging.getLogger(__name__)

ACTION_RETRY = 2.0  # seconds before the next pass after a failed action


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


@dataclasses.dataclass(frozen=True)
class Observation:
    """What ``Reconciler.observe`` read for one pass: the resource and its spec as read, the planner's view
    (``obs``), what the steps write from beyond it (``reads``) and the operator's TLS identity for this cluster
    (``security``; None without security or before its certificate is issued)."""

    body: Body
    ref: ClusterRef
    status: ClusterStatus
    spec: ClusterSpec
    problems: list[SpecProblem]
    applied: dict[str, Any]
    obs: Observed
    reads: observations.Reads
    security: Any = None

    def with_status(self, status: ClusterStatus) -> Observation:
        """The same observation with the status the plan recorded (the step acts on the intent just written)."""
        return dataclasses.replace(self, status=status)


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
        # (namespace, Secret name) -> (resourceVersion, data): a Secret's payload read once per version observed
        self._payloads: dict[tuple[str, str], tuple[str, Mapping[str, str]]] = {}

    # ---- observe: the only reads of the pass ----
    async def observe(self, namespace: str, name: str) -> Observation | None:
        """Everything one pass reads (None: the resource is gone or being deleted): the resource by GET, its objects
        from the watch-fed store (or LISTs), each running member's answer and the leader's view of the ring, the
        Namespace's Pod Security level and the members' StorageClass when it matters, a restore's source backup and
        root CA, and the payload of the Secrets the security steps sign or prove with."""
        body = await self.kube.get_cluster(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        meta = body["metadata"]
        ref = ClusterRef(name=name, namespace=namespace, uid=meta.get("uid", ""), cluster_domain=self.settings.cluster_domain)
        status = ClusterStatus.from_raw(body.get("status"))
        spec, problems, applied = read_spec(body.get("spec"), status.applied_spec)
        secure = spec.security.enabled or bool(status.immutable_spec and status.immutable_spec.get("securityEnabled"))
        obs, reads, security = await self._observe_objects(ref, status, spec, secure)
        recover_from = (meta.get("annotations") or {}).get(naming.ANN_RECOVER_FROM)
        if recover_from:
            obs = dataclasses.replace(obs, recover_from=str(recover_from).strip())
        return Observation(body, ref, status, spec, problems, applied, obs, reads, security)

    async def _observe_objects(
        self, ref: ClusterRef, status: ClusterStatus, spec: ClusterSpec, secure: bool
    ) -> tuple[Observed, observations.Reads, Any]:
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
        raw_pods = await src.list("Pod", ns, labels)
        raw_pvcs = await src.list("PersistentVolumeClaim", ns, labels)
        raw_secrets = {s["metadata"]["name"]: s for s in await src.list("Secret", ns, labels)}
        root_name = naming.root_ca_secret_name(ref.name)
        root = await src.get("Secret", ns, root_name)
        if root is not None:
            raw_secrets[root_name] = root
        pods = {p.name: p for p in map(observations.pod_obs, raw_pods)}
        pvcs = {p.name: p for p in map(observations.pvc_obs, raw_pvcs)}
        secrets = {n: observations.secret_obs(s) for n, s in raw_secrets.items()}
        metadata = {**observations.metadata_entries("Pod", raw_pods),
                    **observations.metadata_entries("PersistentVolumeClaim", raw_pvcs),
                    **observations.metadata_entries("Secret", raw_secrets.values())}
        children: dict[tuple[str, str], str | None] = {}
        owners: dict[tuple[str, str], str | None] = {}
        # the scheduled audit's objects carry the audit label, never LABEL_CLUSTER (see naming.audit_labels)
        audit_labels = {naming.LABEL_AUDIT: ref.name}
        cronjobs = await src.list("CronJob", ns, audit_labels)
        audit_pvcs = await src.list("PersistentVolumeClaim", ns, audit_labels)
        audit_services = await src.list("Service", ns, audit_labels)  # the driver's, with executors on Kubernetes
        metadata.update(observations.metadata_entries("PersistentVolumeClaim", audit_pvcs))
        for kind, objs in [*[(k, await src.list(k, ns, labels)) for k in ("ConfigMap", "Service", "PodDisruptionBudget")],
                           ("CronJob", cronjobs), ("PersistentVolumeClaim", audit_pvcs), ("Service", audit_services)]:
            hashes, owned = observations.child_entries(kind, objs)
            children.update(hashes)
            owners.update(owned)
        audit = None
        if cronjobs or status.audit:
            jobs = await src.list("Job", ns, audit_labels)
            audit_pods = await src.list("Pod", ns, audit_labels) if jobs else []
            audit = audit_status.audit_status(cronjobs[0] if cronjobs else None, jobs, audit_pods)
        backups, backup_jobs = await self._backups(ref, children, owners, metadata, src)
        restore_backup, restore_root_ca = None, None
        source = spec.bootstrap.from_backup
        if source and not spec.bootstrap.backup_path and status.cluster_id is None:
            raw = await self.kube.get(BACKUP_KIND, ns, source)
            restore_backup = None if raw is None else observations.backup_obs(raw)
        payload_names = [root_name, naming.operator_client_secret_name(ref.name), naming.enrollment_secret_name(ref.name)]
        secret_data = await self._secret_data(ns, payload_names, raw_secrets)
        if source and status.cluster_id is None and spec.security.operator_ca:
            restore_name = spec.bootstrap.root_ca_secret or root_name
            raw_root = await self.kube.get("Secret", ns, restore_name)
            restore_root_ca = observations.root_ca_obs(restore_name, raw_root)
            if raw_root is not None:
                secret_data[restore_name] = raw_root.get("data") or {}
        members = {m.name for m in status.members}
        # with no member recorded yet, any running Pod of this cluster's name may be a ring to adopt (planner)
        endpoints = {
            n: Endpoint(n, p.pod_ip, ref.host(n)) for n, p in pods.items()
            if p.pod_ip and p.running and (n in members or (not members and naming.member_index(ref.name, n) is not None))
        }
        reads = observations.Reads(metadata=metadata, secret_data=secret_data)
        client_name = naming.operator_client_secret_name(ref.name)
        security = self.client_security(ref, secure, reads, secrets.get(client_name)) if secure else None
        scms = await self.scm.probe_all(endpoints, security)
        ring = await self._ring(scms, endpoints, security)
        obs = Observed(
            now=self.now(), pods=pods, pvcs=pvcs, scms=scms, ring=ring, children=children, child_owners=owners,
            secrets=secrets,
            audit=audit, pod_security=await self._pod_security(ns),
            volume_expansion=await self._volume_expansion(pvcs, spec.storage.size),
            backups=backups, backup_jobs=backup_jobs, restore_backup=restore_backup, restore_root_ca=restore_root_ca,
        )
        return obs, reads, security

    async def _secret_data(self, namespace: str, names: list[str], seen: Mapping[str, Body]) -> dict[str, Mapping[str, str]]:
        """The data of the Secrets ``names`` this pass saw (``seen``): the seen copy's when it carries data (a LIST
        from the API server), else one GET per version seen (the watch-fed store keeps no Secret payload), then
        kept while the Secret stays at that resourceVersion."""
        out: dict[str, Mapping[str, str]] = {}
        for name in names:
            obj = seen.get(name)
            if obj is None:
                continue
            if "data" in obj:
                out[name] = obj.get("data") or {}
                continue
            version = (obj.get("metadata") or {}).get("resourceVersion") or ""
            cached = self._payloads.get((namespace, name))
            if version and cached is not None and cached[0] == version:
                out[name] = cached[1]
                continue
            fresh = await self.kube.get("Secret", namespace, name)
            if fresh is None:
                continue
            out[name] = data = fresh.get("data") or {}
            got = (fresh.get("metadata") or {}).get("resourceVersion") or ""
            if got:
                self._payloads[(namespace, name)] = (got, data)
        return out

    def client_security(self, ref: ClusterRef, secure: bool, reads: observations.Reads,
                        observed: SecretObs | None = None) -> Any:
        """The operator's TLS identity for this cluster (None without security, or before its certificate is
        issued), from its client Secret as the pass read it; the identity already built for the same certificate
        serial is reused (its channel credentials are built once)."""
        if not secure:
            return None
        key = f"{ref.namespace}/{ref.name}"
        serial = observed.certificate_serial if observed is not None else None
        cached = self._security.get(key)
        if cached is not None and serial and cached[0] == serial:
            return cached[1]
        identity = observations.client_identity(reads, naming.operator_client_secret_name(ref.name), serial or "")
        if identity is None:
            return None
        security = client_security(list(identity.chain), identity.key, identity.root)
        if serial:
            self._security[key] = (serial, security)
        return security

    async def _backups(
        self, ref: ClusterRef, children: dict[tuple[str, str], str | None], owners: dict[tuple[str, str], str | None],
        metadata: dict[tuple[str, str], Body], src: KubeClient | Snapshot | Resync,
    ) -> tuple[dict[str, BackupObs], dict[str, JobObs]]:
        """This cluster's OzoneSCMBackups (``spec.cluster``), their Jobs (with their Pods' termination messages),
        and the backup volume (into ``children`` and ``owners``)."""
        ns = ref.namespace
        labels = {naming.LABEL_BACKUP: ref.name}
        for pvc in await src.list("PersistentVolumeClaim", ns, labels):
            children[("PersistentVolumeClaim", pvc["metadata"]["name"])] = None
            owners[("PersistentVolumeClaim", pvc["metadata"]["name"])] = observations.controller_uid(pvc["metadata"])
        raw = [b for b in await src.list(BACKUP_KIND, ns) if (b.get("spec") or {}).get("cluster") == ref.name]
        metadata.update(observations.metadata_entries(BACKUP_KIND, raw))
        backups = {b.name: b for b in map(observations.backup_obs, raw)}
        jobs: dict[str, JobObs] = {}
        raw_jobs = await src.list("Job", ns, labels)
        if raw_jobs:
            pods = await src.list("Pod", ns, labels)
            for job in raw_jobs:
                obs = observations.job_obs(job, pods)
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
        seen = await self.observe(namespace, name)
        if seen is None:
            return None
        ref, body, obs = seen.ref, seen.body, seen.obs
        meta = body["metadata"]
        plan = planner.plan(
            ref, seen.spec, seen.problems, meta.get("generation"), seen.status, obs,
            planner.Settings(poll_interval=self.settings.poll_interval), applied_spec=seen.applied,
            directives=read_directives(meta.get("annotations")),
        )
        patch = patches.status_patch(body.get("status"), plan.status.to_raw())
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
            await self.recheck(ref, action, obs, seen.security)
        except StepHeld as held:
            LOG.warning("%s/%s: %s %s held: %s", namespace, name, action.kind, action.target, held)
            await self.kube.event(body, "Warning", "WaitingForQuorum", f"{action.kind} {action.target} held: {held}",
                                  self.now(), action=action.kind)
            return ACTION_RETRY
        await self.kube.event(body, action.event_type, action.reason, action.message, obs.now, action=action.kind)
        if action.subject is not None:
            await self.kube.event(patches.event_subject(action.subject), action.event_type, action.reason,
                                  action.message, obs.now, action=action.kind)
        try:
            await self.act(ref, action, seen.with_status(plan.status))
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
    async def recheck(self, ref: ClusterRef, a: planner.Action, obs: Observed, security: Any) -> None:
        """Right before a step that stops a member or takes it out of the ring (a roll's restart, a decommission),
        check its ``guard`` again on fresh reads of the leader's view, not on the pass's observation: poll the
        leader (every half heartbeat interval, for at most the guard's live bound, a few heartbeat intervals) until
        the voters the plan counted have answered it since this re-check began. Raises ``StepHeld`` when they have
        not (a member frozen, crashed or cut off after the plan's check), when the leader does not answer or no
        longer leads; the step is then not performed and the next pass plans again. (The step's own SCM call, not
        a read of the Kubernetes API: the observation stays ``observe``'s.)"""
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

    async def act(self, ref: ClusterRef, a: planner.Action, seen: Observation) -> None:
        """Perform one step, by its class (``planner.actions``); a step not handled here fails type checking. Every
        body comes from a pure builder (the plan's, ``patches``, ``certs``); what a step needs beyond the plan was
        read by ``observe`` (``seen.reads``). The verbs: apply, create, delete, merge-patch, and the SCM calls."""
        await self._before_act(ref, a)
        ns, obs, reads, now = ref.namespace, seen.obs, seen.reads, self.now()
        match a:
            case planner.Apply(body=body):
                await self.kube.apply(body)
            case (planner.CreatePod(body=body) | planner.CreatePVC(body=body) | planner.CreateJob(body=body)
                  | planner.CreateBackup(body=body)):
                await self._create(body)
            case planner.DeleteObject(object_kind=kind):
                await self.kube.delete(kind, ns, a.target)
            case planner.DeletePod() | planner.DeletePVC() | planner.DeleteSecret() | planner.DeleteBackup():
                await self.kube.delete(patches.DELETED_KIND[type(a)], ns, a.target)  # a roll's restart: re-checked
            case (planner.RetainPVC() | planner.ReleasePVC() | planner.LabelPVC() | planner.ExpandPVC() | planner.Adopt()
                  | planner.ClearAnnotation() | planner.RemoveAnnotation() | planner.UpdateBackup()):
                pass  # merge patches only (below)
            case planner.RevokeCertificate(serial=serial, revocation_reason=reason):  # then its mark (below)
                await self.scm.revoke(self._endpoints(ref, seen), [serial], reason, seen.security)
            case planner.CreateRootCA(copy_from=source) if source:  # a secure restore: the backup's root CA
                root = observations.restore_root(reads, source, a.fingerprint)
                await self._create(certs.root_ca_secret(ref, root))
            case planner.CreateRootCA(duration=duration):
                root = certs.create_root_ca(self.keygen(), cluster=ref.name, namespace=ns, now=now, duration=duration,
                                            serial=self.serial())
                await self._create(certs.root_ca_secret(ref, root))
            case planner.IssueMemberCertificate(member=member, duration=duration):
                root = observations.root_pair(reads, naming.root_ca_secret_name(ref.name))
                pair = certs.issue_member_certificate(root, self.keygen(), ref=ref, member=member, now=now,
                                                      duration=duration, serial=self.serial())
                await self.kube.apply(certs.member_tls_secret(ref, member, pair, root.certificate))
            case planner.IssueClientCertificate(duration=duration):
                root = observations.root_pair(reads, naming.root_ca_secret_name(ref.name))
                pair = certs.issue_client_certificate(root, self.keygen(), ref=ref, now=now, duration=duration,
                                                      serial=self.serial())
                await self.kube.apply(certs.client_tls_secret(ref, pair, root.certificate))
            case planner.CreateEnrollmentSecret(scm=scm):
                scm_secret = secrets.token_hex(32) if scm else None
                await self._create(builders.build_enrollment_secret(ref, secrets.token_hex(32), scm_secret))
            case planner.CreateClientKey():
                await self._create(certs.client_key_secret(ref, self.keygen()))
            case planner.CreateAdminCSR():
                key = observations.client_key(reads, naming.operator_client_secret_name(ref.name))
                await self._create(certs.admin_csr_secret(ref, certs.client_csr(key)))
            case planner.FetchClientCertificate(member=member):
                key = observations.client_key(reads, naming.operator_client_secret_name(ref.name))
                proof = observations.enrollment_proof(reads, naming.enrollment_secret_name(ref.name))
                chain, scm_root = await self.scm.fetch_client_certificate(
                    self._endpoint(ref, obs, member), proof, certs.public_key_sha256(key))
                await self.kube.apply(certs.client_tls_secret_from_scm(ref, key, chain, scm_root))
            case planner.RenewClientCertificate():
                key = self.keygen()
                csr_pem = certs.client_csr(key).public_bytes(serialization.Encoding.PEM).decode("ascii")
                chain, scm_root = await self.scm.renew_client_certificate(self._endpoints(ref, seen), csr_pem, seen.security)
                await self.kube.apply(certs.client_tls_secret_from_scm(ref, key, chain, scm_root))
            case planner.TransferLeadership(to_scm_id=to_scm_id):
                if to_scm_id is None:
                    raise RuntimeError(f"{a.to} has no scmId to transfer leadership to")
                await self.scm.transfer(self._endpoints(ref, seen), to_scm_id, seen.security)
            case planner.Decommission(scm_id=scm_id):
                await self.scm.decommission(self._endpoints(ref, seen), scm_id, seen.security)
            case _:
                assert_never(a)
        for p in patches.step_patches(ref, a, obs.now, reads):
            await self.kube.merge_patch(p.kind, ns, p.name, p.body, subresource=p.subresource)

    async def _before_act(self, ref: ClusterRef, a: planner.Action) -> None:
        """The test failpoints (exit or block right before the step, its intent in status) and the Lease's fence."""
        if self.settings.crash_before == (a.kind, a.target):
            LOG.error("failpoint: exiting before %s %s (its intent is in status)", a.kind, a.target)
            logging.shutdown()
            os._exit(86)
        if self.settings.pause_before == (a.kind, a.target):
            LOG.error("failpoint: pausing before %s %s (its intent is in status)", a.kind, a.target)
            await asyncio.Event().wait()
        if not self._may_act(ref.namespace, ref.name, f"{a.kind} {a.target}"):
            raise RuntimeError("this replica no longer holds the leader-election Lease")

    async def _create(self, body: Body) -> None:
        try:
            await self.kube.create(body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            LOG.info("%s %s already exists", body["kind"], body["metadata"]["name"])

    @staticmethod
    def _endpoint(ref: ClusterRef, obs: Observed, member: str) -> Endpoint:
        pod = obs.pods.get(member)
        if pod is None or not pod.pod_ip:
            raise RuntimeError(f"Pod {member} has no IP yet")
        return Endpoint(member, pod.pod_ip, ref.host(member))

    @staticmethod
    def _endpoints(ref: ClusterRef, seen: Observation) -> list[Endpoint]:
        """The members that answered, the leader first (the admin client follows NotLeader hints anyway)."""
        leader = seen.status.leader
        names = sorted(seen.obs.scms, key=lambda n: n != leader)
        return [Endpoint(n, ip, ref.host(n)) for n in names
                if (p := seen.obs.pods.get(n)) is not None and (ip := p.pod_ip)]

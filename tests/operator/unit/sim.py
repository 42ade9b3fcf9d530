"""A deterministic model of what the operator acts on: Pods, volumes, Secrets and an SCM Raft ring, as plain data.

Used by the planner tests only. One ``World.step()`` plays the kubelet and the SCMs for one tick: Pods start
(running their init container's ``scm --init`` / ``scm --bootstrap`` against the volume's VERSION), started SCMs
ask the leader to add them (AddSCM: learner, then voter), the ring elects a leader among a live majority, and
readiness follows "voter of a ring with a leader". ``World.apply(action)`` performs an operator action the way the
effects layer would. ``World.observe()`` builds the :class:`Observed` value the planner reads.

Backups are played too: a backup Job runs in one tick (it fails when its backup is in ``failing_backups`` or the ring
has no leader), writing its directory into ``backup_data``; a clean-up Job removes it; an ``OzoneSCMBackup`` being
deleted goes once its finalizers are gone. ``apply`` refuses two backup Jobs at once, a clean-up while the backup
still writes, and deleting data of a backup that is not being deleted.

Safety is checked where it matters, in ``apply``: the operator must never decommission the leader, delete the
volume of an SCM still in the ring, take a caught-up voter down when that leaves no caught-up majority, or start a
second ring (``scm --init`` on an empty volume once a cluster exists). Violations raise :class:`Unsafe`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable
from typing import Any, assert_never

from ozone_scm_operator import backup_builders, builders, naming, planner, podsecurity
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.directives import read_directives
from ozone_scm_operator.model import (
    FOREIGN_VOLUME_PREFIX,
    BackupObs,
    ClusterStatus,
    ContainerObs,
    JobObs,
    Observed,
    PeerObs,
    PodObs,
    PVCObs,
    RingObs,
    RootCAObs,
    SCMObs,
    SecretObs,
)
from ozone_scm_operator.observations import backup_obs, controller_uid
from ozone_scm_operator.spec import quantity_bytes as spec_bytes
from ozone_scm_operator.spec import read_spec

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _ts(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Unsafe(AssertionError):
    """The operator did something that could lose data or the quorum."""


@dataclasses.dataclass
class SimPod:
    name: str
    revision: str
    init_mode: str
    image: str
    created_at: datetime.datetime
    phase: str = "Pending"
    alive: bool = False
    deleting: bool = False
    trouble: str | None = None
    init_command: tuple[str, ...] = ()  # the init container of its init mode (the last one)
    download_command: tuple[str, ...] = ()  # an init container ``download`` before it (a restore from S3)
    ozone_claim: str | None = None  # the PersistentVolumeClaim mounted as Ozone's SCM metadata (a migration)


@dataclasses.dataclass
class SimPVC:
    name: str
    cluster_id: str | None = None
    scm_id: str | None = None
    deleting: bool = False
    owned: bool = True
    owner: str | None = None  # the uid of its controller owner (reclaimPolicy Delete, or adopted)
    label_cid: str | None = None  # its cluster-ID label
    size: str = "10Gi"
    has_conf: bool = False  # its Raft storage holds a configuration (AddSCM only on the very first start)


class World:
    def __init__(self, spec: dict[str, Any], *, name: str = "scm", broken_images: frozenset[str] = frozenset()) -> None:
        self.ref = ClusterRef(name=name, namespace="ns", uid="uid-1")
        self.spec_raw = spec
        self.annotations: dict[str, str] = {}  # the resource's annotations (requests to the operator)
        self.generation = 1
        self.status_raw: dict[str, Any] = {}
        self.now = T0
        self.pods: dict[str, SimPod] = {}
        self.pvcs: dict[str, SimPVC] = {}
        self.children: dict[tuple[str, str], str | None] = {}
        self.child_owners: dict[tuple[str, str], str | None] = {}  # the uid of each child's controller owner
        self.secrets: dict[str, SecretObs] = {}
        self.voters: set[str] = set()
        self.learners: set[str] = set()
        self.leader: str | None = None
        self.term = 0
        self.cluster_id: str | None = None
        self.clusters_created = 0
        self._ids = 0
        self.broken_images = broken_images
        self.broken_pods: set[str] = set()  # Pods whose SCM keeps crashing (CrashLoopBackOff)
        self.in_safe_mode: set[str] = set()  # members whose SCM answers that it is in safemode
        # members whose SCM process is frozen (SIGSTOP): its Pod still looks ready and its lag small, but it answers
        # nobody, so the leader's last contact with it grows
        self.frozen: set[str] = set()
        # called with the planned step after the plan's check and before the reconciler's re-check (a member frozen
        # in between); the steps the re-check held, with why
        self.before_recheck: Callable[[planner.Action], None] | None = None
        self.held: list[tuple[planner.Action, str]] = []
        self.volume_expansion: bool | None = True  # the StorageClass's allowVolumeExpansion
        self.pod_security: str | None = None  # the level the namespace enforces (Pod Security admission)
        self.orphaned: set[str] = set()  # Pods, volumes and Secrets nothing owns (after kubectl delete --cascade=orphan)
        self.actions: list[planner.Action] = []
        self.events: list[str] = []
        self.action_events: list[str] = []  # "<type> <reason>: <message>" of every action performed
        self.hooks: list[Callable[[World], None]] = []
        self.leaders_history: list[str] = []
        self.pod_deletions: list[str] = []
        self.revoked: list[str] = []  # serials (decimal) revoked through SCM
        self.scm_cert_lifetime = datetime.timedelta(days=365)  # CA mode scm: hdds.x509.default.duration
        self.signed_keys: set[str | None] = set()  # CA mode scm: keys whose CSR the primordial signed at --init
        self.backups: dict[str, dict[str, Any]] = {}  # OzoneSCMBackup objects as the API server holds them
        self.jobs: dict[str, JobObs] = {}  # backup and clean-up Jobs
        self.backup_data: set[str] = set()  # backup directories on the backup volume
        self.failing_backups: set[str] = set()  # backups whose Job fails
        self.held_jobs: set[str] = set()  # Jobs that keep running until released
        self.recover_from: str | None = None  # the ozone-scm.io/recover-from annotation
        self.stored_backups: dict[str, str] = {}  # backup directory (as the Pod sees it) -> its cluster ID
        # spec.bootstrap.fromOzone: a volume holding an Ozone SCM's metadata -> (db path inside it, its clusterID)
        self.ozone_volumes: dict[str, tuple[str, str]] = {}
        self.migrations = 0
        self.s3_backups: dict[str, str] = {}  # s3:// URL of a backup in object storage -> its cluster ID
        self.job_s3_urls: dict[str, str] = {}  # backup or clean-up Job -> the s3:// URL it uploads to or deletes
        self.restore_backup: BackupObs | None = None  # the OzoneSCMBackup spec.bootstrap.fromBackup names
        self.restore_root_ca: RootCAObs | None = None  # the Secret spec.bootstrap.rootCASecret names, as read
        self.commit_index = 100

    # ---- backups ----
    def create_backup(self, name: str, cluster: str | None = None) -> None:
        """A user's ``kubectl apply`` of a one-off OzoneSCMBackup."""
        self.backups[name] = {"metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": _ts(self.now)},
                              "spec": {"cluster": cluster or self.ref.name}}

    def delete_backup(self, name: str) -> None:
        """``kubectl delete ozonescmbackup``: gone at once without finalizers, else marked for deletion."""
        body = self.backups[name]
        if body["metadata"].get("finalizers"):
            body["metadata"]["deletionTimestamp"] = _ts(self.now)
        else:
            del self.backups[name]

    def backup_phase(self, name: str) -> str | None:
        body = self.backups.get(name)
        return None if body is None else (body.get("status") or {}).get("phase")

    def _run_jobs(self) -> None:
        for name, job in list(self.jobs.items()):
            if job.result is not None or name in self.held_jobs:
                continue
            if job.purpose == backup_builders.PURPOSE_BACKUP:
                if job.backup in self.failing_backups or self.leader is None:
                    why = "no leader" if self.leader is None else "the ring is in safemode; retry with --allow-safemode"
                    self.jobs[name] = dataclasses.replace(job, result="Failed", finished_at=self.now,
                                                          message=f"Error: {why}")
                    continue
                self.backup_data.add(job.backup)
                if name in self.job_s3_urls:
                    self.s3_backups[self.job_s3_urls[name]] = str(self.cluster_id)
                summary = {"clusterID": self.cluster_id, "term": self.term, "index": self.commit_index,
                           "createdMs": 1, "sizeBytes": 4096}
                root = self.secrets.get(naming.root_ca_secret_name(self.ref.name))
                if root is not None:  # a secure ring records its root CA (backup verify's summary says so)
                    summary |= {"rootCAFingerprint": root.root_fingerprint, "includesRootKey": False}
                self.jobs[name] = dataclasses.replace(job, result="Succeeded", finished_at=self.now,
                                                      message=json.dumps(summary))
            else:
                self.backup_data.discard(job.backup)
                self.s3_backups.pop(self.job_s3_urls.get(name, ""), None)
                self.jobs[name] = dataclasses.replace(job, result="Succeeded", finished_at=self.now)
        for name, body in list(self.backups.items()):
            if body["metadata"].get("deletionTimestamp") and not body["metadata"].get("finalizers"):
                del self.backups[name]
                for job_name in [j for j, o in self.jobs.items() if o.backup == name]:
                    del self.jobs[job_name]  # owned by the backup: the garbage collector removes them

    # ---- identities ----
    def _new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}"

    def scm_of(self, member: str) -> str | None:
        pvc = self.pvcs.get(naming.pvc_name(member))
        return pvc.scm_id if pvc is not None else None

    def member_of(self, scm_id: str) -> str | None:
        for pvc in self.pvcs.values():
            if pvc.scm_id == scm_id:
                return pvc.name[: -len("-data")]
        return None

    def alive_scm(self, scm_id: str) -> bool:
        member = self.member_of(scm_id)
        pod = self.pods.get(member) if member else None
        return pod is not None and pod.alive and member not in self.frozen

    def healthy_voters(self) -> set[str]:
        if self.leader is None:
            return set()
        return {s for s in self.voters if self.alive_scm(s)}

    # ---- the kubelet and the SCMs, one tick ----
    def step(self) -> None:
        for name in list(self.pods):
            pod = self.pods[name]
            if pod.deleting:
                del self.pods[name]
        for name in list(self.pvcs):
            pvc = self.pvcs[name]
            if pvc.deleting and name[: -len("-data")] not in self.pods:
                del self.pvcs[name]
        for pod in self.pods.values():
            if pod.phase == "Pending":
                self._start(pod)
        for pod in self.pods.values():
            if not pod.alive:
                continue
            vol = self.pvcs.get(naming.pvc_name(pod.name))
            if vol is None or vol.scm_id is None:
                continue
            sid = vol.scm_id
            if sid in self.learners:
                self.learners.discard(sid)
                self.voters.add(sid)
            elif sid not in self.voters and not vol.has_conf and self.leader is not None and self.alive_scm(self.leader):
                self.learners.add(sid)  # AddSCM on first start
                vol.has_conf = True
        if self.leader is not None and (not self.alive_scm(self.leader) or self.leader not in self.voters):
            self.leader = None
        if self.leader is not None and sum(1 for v in self.voters if self.alive_scm(v)) < len(self.voters) // 2 + 1:
            self.leader = None  # a leader that hears no majority steps down (check quorum)
        if self.leader is None:
            alive = sorted(s for s in self.voters if self.alive_scm(s))
            if alive and len(alive) >= len(self.voters) // 2 + 1:
                self.leader = alive[0]
                self.term += 1
                self.leaders_history.append(self.leader)
        self._run_jobs()
        for hook in self.hooks:
            hook(self)

    def _start(self, pod: SimPod) -> None:
        if pod.image in self.broken_images:
            pod.trouble = "ImagePullBackOff"
            return
        if pod.name in self.broken_pods:
            pod.trouble = "CrashLoopBackOff"
            return
        pvc = self.pvcs.get(naming.pvc_name(pod.name))
        if pvc is None or pvc.deleting:
            pod.trouble = "Unschedulable"
            return
        if pod.init_mode == builders.INIT_MODE_RESTORE:
            # scm --restore DIR [--clusterid ID]: a one-member ring of the backup's cluster, on empty storage only
            cmd = list(pod.init_command)
            path = cmd[cmd.index("--restore") + 1]
            if pod.download_command:
                # backup download s3://... DIR: the objects' backup lands in the Pod's own scratch directory
                url, dest = pod.download_command[5], pod.download_command[6]
                if url not in self.s3_backups:
                    pod.trouble = f"init container download: {url} holds no manifest.json"
                    return
                self.stored_backups[dest] = self.s3_backups[url]
            cid = self.stored_backups.get(path)
            if cid is None:
                pod.trouble = f"init container restore: {path} holds no backup"
                return
            if "--clusterid" in cmd and cmd[cmd.index("--clusterid") + 1] != cid:
                raise Unsafe(f"--clusterid {cmd[cmd.index('--clusterid') + 1]} for a backup of {cid}")
            if pvc.cluster_id is not None:
                raise Unsafe(f"scm --restore over {pod.name}'s own data (a restarted restored member)")
            want_root = (self.restore_backup.status.get("rootCAFingerprint") if self.restore_backup else None)
            root = self.secrets.get(naming.root_ca_secret_name(self.ref.name))
            if want_root and (root is None or root.root_fingerprint != want_root):
                raise Unsafe("scm --restore of a secure ring under another root CA than the backup's")
            pvc.cluster_id = self.cluster_id = cid
            pvc.scm_id = self._new_id("scm")
            self.voters, self.learners = {pvc.scm_id}, set()
            pvc.has_conf = True
            self.leader = pvc.scm_id
            self.term += 1
            self.leaders_history.append(self.leader)
        elif pod.init_mode == builders.INIT_MODE_MIGRATE:
            # migrate from-ozone --ozone-db DB: a one-member ring of Ozone's cluster, on empty storage only
            cmd = list(pod.init_command)
            db = cmd[cmd.index("--ozone-db") + 1]
            held = self.ozone_volumes.get(pod.ozone_claim or "")
            if held is None or db != f"{naming.OZONE_SCM_DIR}/{held[0]}":
                pod.trouble = f"init container migrate: {db} holds no Ozone scm.db"
                return
            if pvc.cluster_id is not None:
                raise Unsafe(f"migrate from-ozone over {pod.name}'s own data (a restarted migrated member)")
            if self.cluster_id is not None:
                raise Unsafe(f"migrate from-ozone on {pod.name} while the ring of {self.cluster_id} exists")
            self.migrations += 1
            pvc.cluster_id = self.cluster_id = held[1]
            pvc.scm_id = self._new_id("scm")
            self.voters, self.learners = {pvc.scm_id}, set()
            pvc.has_conf = True
            self.leader = pvc.scm_id
            self.term += 1
            self.leaders_history.append(self.leader)
        elif pod.init_mode == builders.INIT_MODE_RECOVER:
            if pvc.cluster_id is None or pvc.scm_id is None:
                raise Unsafe(f"scm --recover on {pod.name}, whose volume holds no ring")
            answering = 1 + sum(1 for v in self.voters if v != pvc.scm_id and self.alive_scm(v))
            if len(self.voters) > 1 and answering >= len(self.voters) // 2 + 1:
                raise Unsafe(f"scm --recover on {pod.name} while a majority of the ring answers")
            self.voters, self.learners = {pvc.scm_id}, set()
            self.leader = pvc.scm_id
            self.term += 1
            self.leaders_history.append(self.leader)
        elif pod.init_mode == builders.INIT_MODE_INIT:
            if pvc.cluster_id is None:
                if self.cluster_id is not None:
                    raise Unsafe(f"scm --init on an empty volume of {pod.name}: a second cluster would be created")
                self.clusters_created += 1
                csr = self.secrets.get(naming.admin_csr_secret_name(self.ref.name))
                if csr is not None:  # CA mode scm: --init signs ozone.scm.security.admin.csr.files
                    self.signed_keys.add(csr.public_key)
                pvc.cluster_id = self.cluster_id = self._new_id("CID")
                pvc.scm_id = self._new_id("scm")
                self.voters = {pvc.scm_id}
                pvc.has_conf = True
                self.leader = pvc.scm_id
                self.term += 1
                self.leaders_history.append(self.leader)
        else:
            if pvc.cluster_id is None:
                if self.leader is None or self.cluster_id is None:
                    pod.trouble = "init container bootstrap: no SCM answered GetScmInfo"
                    return
                pvc.cluster_id = self.cluster_id
                pvc.scm_id = self._new_id("scm")
            elif pvc.cluster_id != self.cluster_id:
                pod.trouble = (f"{FOREIGN_VOLUME_PREFIX} this volume holds cluster {pvc.cluster_id}; the running SCMs "
                               f"are cluster {self.cluster_id}")
                return
            elif pvc.scm_id not in self.voters | self.learners and pvc.scm_id is not None:
                pass  # a decommissioned identity would ask to be added again: only a fresh name is ever started
        pod.trouble = None
        pod.phase = "Running"
        pod.alive = True

    # ---- observation ----
    def observe(self) -> Observed:
        pods: dict[str, PodObs] = {}
        for p in self.pods.values():
            containers: tuple[ContainerObs, ...] = ()
            if p.trouble and p.trouble.startswith(FOREIGN_VOLUME_PREFIX):
                # as a kubelet reports it: back-off, and the fixed-format termination message of the refusal
                containers = (ContainerObs(name="bootstrap", init=True, waiting_reason="CrashLoopBackOff",
                                           waiting_message="back-off 10s restarting failed container=bootstrap",
                                           exit_code=1, terminated_message=p.trouble),)
            elif p.trouble:
                containers = (ContainerObs(name="bootstrap", init=True, waiting_reason="CrashLoopBackOff",
                                           waiting_message=p.trouble),)
            sid = self.scm_of(p.name)
            ready = p.alive and sid in self.voters and self.leader is not None  # a frozen SCM's too, for a while
            pods[p.name] = PodObs(
                name=p.name, phase=p.phase, ready=ready, deleting=p.deleting, revision=p.revision,
                init_mode=p.init_mode, pod_ip=f"10.0.0.{len(pods) + 1}" if p.alive else None,
                created_at=p.created_at, containers=containers,
                controller_uid=None if p.name in self.orphaned else self.ref.uid,
            )
        pvcs = {n: PVCObs(name=n, phase="Bound", deleting=v.deleting,
                          controller_uid=None if n in self.orphaned else v.owner, cluster_id=v.label_cid,
                          size=v.size, storage_class_name="standard") for n, v in self.pvcs.items()}
        secrets = {n: dataclasses.replace(v, controller_uid=None if n in self.orphaned else self.ref.uid)
                   for n, v in self.secrets.items()}
        scms = {}
        for p in self.pods.values():
            pvc = self.pvcs.get(naming.pvc_name(p.name))
            if p.alive and p.name not in self.frozen and pvc is not None and pvc.cluster_id and pvc.scm_id:
                scms[p.name] = SCMObs(member=p.name, cluster_id=pvc.cluster_id, scm_id=pvc.scm_id,
                                      leader_id=self.leader, term=self.term,
                                      in_safe_mode=p.name in self.in_safe_mode)
        ring = None
        client = self.secrets.get(naming.operator_client_secret_name(self.ref.name))
        # as the reconciler decides: by the security switch the ring was created with (pinned in status)
        secure = bool((self.status_raw.get("immutableSpec") or {}).get("securityEnabled"))
        if secure and (client is None or client.certificate_not_after is None):
            # mutual TLS: without its client certificate the operator gets no answer from any SCM
            return Observed(now=self.now, pods=pods, pvcs=pvcs, scms={}, ring=None, children=dict(self.children),
                            child_owners=self._child_owners(), secrets=secrets, pod_security=self.pod_security, volume_expansion=self.volume_expansion,
                            restore_backup=self.restore_backup, restore_root_ca=self.restore_root_ca)
        if self.leader is not None and self.member_of(self.leader) not in self.frozen:  # a frozen leader answers nobody
            peers = [
                PeerObs(scm_id=s, role="LEADER" if s == self.leader else "FOLLOWER", node_id=self.member_of(s) or "",
                        # a frozen SCM's lag still looks small: only its silence gives it away
                        lag=0 if self.alive_scm(s) or self.member_of(s) in self.frozen else 5000,
                        last_contact=0.1 if self.alive_scm(s) else 30.0)
                for s in sorted(self.voters)
            ] + [PeerObs(scm_id=s, role="LEARNER", lag=10, last_contact=0.1) for s in sorted(self.learners)]
            ring = RingObs(leader_scm_id=self.leader, term=self.term, commit_index=100, peers=tuple(peers),
                           election_timeout=1.0, heartbeat_interval=0.1)
        return Observed(now=self.now, pods=pods, pvcs=pvcs, scms=scms, ring=ring, children=dict(self.children),
                        child_owners=self._child_owners(), secrets=secrets, pod_security=self.pod_security, volume_expansion=self.volume_expansion,
                        backups=self._backup_obs(), backup_jobs=dict(self.jobs), recover_from=self.recover_from,
                        restore_backup=self.restore_backup, restore_root_ca=self.restore_root_ca)

    def _child_owners(self) -> dict[tuple[str, str], str | None]:
        return {key: self.child_owners.get(key) for key in self.children}

    def _backup_obs(self) -> dict[str, Any]:
        return {n: backup_obs(b) for n, b in self.backups.items() if b["spec"]["cluster"] == self.ref.name}

    # ---- the operator's actions ----
    def apply(self, a: planner.Action) -> None:
        """Play one step, by its class (``planner.actions``); a step not handled here fails type checking."""
        self.actions.append(a)
        match a:
            case planner.Apply(body=body):
                key = (body["kind"], body["metadata"]["name"])
                self.children[key] = body["metadata"]["annotations"][naming.ANN_CONTENT_HASH]
                self.child_owners[key] = controller_uid(body["metadata"])
            case planner.DeleteObject(object_kind=kind):
                self.children.pop((kind, a.target), None)
                self.child_owners.pop((kind, a.target), None)
            case planner.CreatePVC(body=body) if naming.LABEL_BACKUP in body["metadata"]["labels"]:
                key = ("PersistentVolumeClaim", a.target)
                if key in self.children:
                    raise Unsafe(f"PVC {a.target} created twice")
                if body["metadata"].get("ownerReferences"):
                    raise Unsafe(f"the backup volume {a.target} is owned: deleting the cluster would delete the backups")
                self.children[key] = None
            case planner.CreatePVC(body=body) if naming.LABEL_AUDIT in body["metadata"]["labels"]:
                key = ("PersistentVolumeClaim", a.target)
                if key in self.children:
                    raise Unsafe(f"PVC {a.target} created twice")
                self.children[key] = None  # the audit's report volume: listed by its audit label, not as a member's
                self.child_owners[key] = controller_uid(body["metadata"])
            case planner.CreatePVC(body=body):
                if a.target in self.pvcs:
                    raise Unsafe(f"PVC {a.target} created twice")
                owners = body["metadata"].get("ownerReferences") or []
                self.pvcs[a.target] = SimPVC(a.target, owner=owners[0]["uid"] if owners else None,
                                             size=body["spec"]["resources"]["requests"]["storage"])
            case planner.UpdateBackup(status=status, finalizers=finalizers):
                backup = self.backups[a.target]
                if finalizers is not None:
                    backup["metadata"]["finalizers"] = list(finalizers)
                st = backup.setdefault("status", {})
                for name, value in (status or {}).items():
                    if value is None:
                        st.pop(name, None)
                    else:
                        st[name] = value
            case planner.CreateJob(body=body):
                if a.target in self.jobs:
                    raise Unsafe(f"Job {a.target} created twice")
                refused = podsecurity.check(body["spec"]["template"]["spec"], self.pod_security or "restricted")
                if refused:
                    raise Unsafe(f"Job {a.target} refused by Pod Security admission: {refused}")
                labels = body["metadata"]["labels"]
                purpose, of = labels[backup_builders.LABEL_PURPOSE], labels[naming.LABEL_BACKUP_NAME]
                running = [j for j in self.jobs.values() if j.result is None and j.purpose == purpose]
                if purpose == backup_builders.PURPOSE_BACKUP and running:
                    raise Unsafe(f"backup Job {a.target} while {running[0].name} still runs")
                if purpose == backup_builders.PURPOSE_DELETE:
                    if not self.backups[of]["metadata"].get("deletionTimestamp"):
                        raise Unsafe(f"deleting the data of backup {of}, which is not being deleted")
                    if any(j.result is None for j in self.jobs.values() if j.backup == of):
                        raise Unsafe(f"deleting the data of backup {of} while its Job still writes")
                self.jobs[a.target] = JobObs(name=a.target, backup=of, purpose=purpose)
                main = body["spec"]["template"]["spec"]["containers"][0]
                url = next((arg for arg in main["command"] if arg.startswith("s3://")), None)
                if url is not None:
                    self.job_s3_urls[a.target] = url
            case planner.CreateBackup(body=body):
                if a.target in self.backups:
                    raise Unsafe(f"OzoneSCMBackup {a.target} created twice")
                copy = json.loads(json.dumps(body))
                copy["metadata"].update(uid=f"uid-{a.target}", creationTimestamp=_ts(self.now))
                self.backups[a.target] = copy
            case planner.DeleteBackup():
                self.delete_backup(a.target)
            case planner.RemoveAnnotation(key=annotation):
                assert annotation == naming.ANN_RECOVER_FROM
                self.recover_from = None
            case planner.CreatePod(body=body):
                if a.target in self.pods:
                    raise Unsafe(f"Pod {a.target} created twice")
                refused = podsecurity.check(body["spec"], self.pod_security) if self.pod_security else []
                if refused:
                    raise Unsafe(f"Pod {a.target} refused by Pod Security admission: {refused}")
                ann = body["metadata"]["annotations"]
                self.pods[a.target] = SimPod(
                    a.target, ann[naming.ANN_REVISION], ann[naming.ANN_INIT_MODE],
                    body["spec"]["containers"][0]["image"], self.now,
                    init_command=tuple(body["spec"]["initContainers"][-1]["command"]),
                    download_command=next((tuple(c["command"]) for c in body["spec"]["initContainers"]
                                           if c["name"] == "download"), ()),
                    ozone_claim=next((v["persistentVolumeClaim"]["claimName"] for v in body["spec"]["volumes"]
                                      if v["name"] == "ozone-scm"), None),
                )
            case planner.DeletePod():
                pod = self.pods[a.target]
                sid = self.scm_of(a.target)
                healthy = self.healthy_voters()
                # (a one-member ring has no majority to keep: restarting it is an outage the operator may cause;
                # hibernation stops the whole ring on purpose: every committed entry stays on the volumes)
                hibernating = a.reason == "Hibernating"
                if (not hibernating and sid in healthy and len(self.voters) > 1
                        and len(healthy) - 1 < len(self.voters) // 2 + 1):
                    raise Unsafe(f"deleting Pod {a.target} leaves no caught-up majority ({healthy})")
                if not hibernating and sid is not None and sid == self.leader and len(self.voters) > 1:
                    raise Unsafe(f"deleting the leader's Pod {a.target} without a leadership transfer")
                pod.deleting = True
                pod.alive = False
                self.pod_deletions.append(a.target)
            case planner.DeletePVC() | planner.RetainPVC():
                pvc = self.pvcs[a.target]
                if pvc.scm_id in self.voters | self.learners:
                    raise Unsafe(f"{a.kind} {a.target}: its SCM {pvc.scm_id} is still in the ring")
                if isinstance(a, planner.DeletePVC):
                    pvc.deleting = True
                else:
                    pvc.owned = False
                    del self.pvcs[a.target]  # no longer the cluster's: out of the operator's view
            case planner.Decommission(scm_id=sid):
                if sid == self.leader:
                    raise Unsafe(f"decommissioning the leader {sid}")
                healthy = self.healthy_voters()
                if sid in healthy and len(healthy) - 1 < (len(self.voters) - 1) // 2 + 1:
                    raise Unsafe(f"decommissioning {sid} leaves no caught-up majority")
                self.voters.discard(sid)
                self.learners.discard(sid)
            case planner.TransferLeadership(to_scm_id=to):
                if to in self.voters and self.alive_scm(to):
                    self.leader = to
                    self.term += 1
                    self.leaders_history.append(to)
            case planner.CreateRootCA(copy_from=copy_from, fingerprint=fingerprint, duration=root_duration):
                if copy_from:
                    src = self.restore_root_ca
                    if src is None or src.name != copy_from or src.fingerprint != fingerprint:
                        raise Unsafe(f"root CA taken from {copy_from}, which is not what the planner checked")
                self.secrets[a.target] = SecretObs(a.target, root_fingerprint=fingerprint or "fp-root",
                                                   certificate_not_after=self.now + root_duration)
            case planner.IssueMemberCertificate(duration=duration) | planner.IssueClientCertificate(duration=duration):
                self._ids += 1
                root = self.secrets.get(naming.root_ca_secret_name(self.ref.name))
                self.secrets[a.target] = SecretObs(
                    a.target, certificate_serial=format(self._ids, "x"),
                    root_fingerprint=root.root_fingerprint if root is not None else "fp-root",
                    # as certs._issue does: never past the root CA's own end
                    certificate_not_after=min(self.now + duration, root.certificate_not_after)
                    if root is not None and root.certificate_not_after is not None else self.now + duration,
                    role_bound=True,
                )
            case planner.CreateClientKey():
                if a.target in self.secrets:
                    raise Unsafe(f"a new key in {a.target} would orphan the CSR the primordial signs")
                self._ids += 1
                self.secrets[a.target] = SecretObs(a.target, public_key=f"pk-{self._ids}")
            case planner.CreateAdminCSR():
                client = self.secrets.get(naming.operator_client_secret_name(self.ref.name))
                if client is None:
                    raise Unsafe("a CSR without the operator's key")
                self.secrets[a.target] = SecretObs(a.target, public_key=client.public_key)
            case planner.FetchClientCertificate() | planner.RenewClientCertificate():
                if isinstance(a, planner.FetchClientCertificate):
                    primordial = self.pods.get(a.member)
                    if (primordial is None or primordial.init_mode != "init" or not primordial.alive
                            or self.leader != self.scm_of(primordial.name)):
                        raise Unsafe(f"fetching the --init certificate from {a.member}, not a leading primordial")
                    client = self.secrets[a.target]
                    if client.public_key not in self.signed_keys:
                        raise Unsafe(f"fetching a certificate for key {client.public_key}, which SCM never signed")
                elif self.leader is None:
                    raise Unsafe("renewing with no leader to sign")
                self._ids += 1
                self.secrets[a.target] = SecretObs(
                    a.target, certificate_serial=format(self._ids, "x"), root_fingerprint="fp-scm-root",
                    certificate_not_after=self.now + self.scm_cert_lifetime, certificate_not_before=self.now,
                    public_key=self.secrets[a.target].public_key,
                )
            case planner.CreateEnrollmentSecret():
                self.secrets[a.target] = SecretObs(a.target)
            case planner.RevokeCertificate(serial=serial):
                secret = self.secrets[a.target]
                if int(secret.certificate_serial or "0", 16) != int(serial):
                    raise Unsafe(f"revoking serial {serial}, not the certificate in {a.target}")
                owner = a.target.removesuffix("-tls")
                if self.scm_of(owner) in self.voters | self.learners:
                    raise Unsafe(f"revoking the certificate of {owner} while it is still in the ring")
                self.revoked.append(serial)
                self.secrets[a.target] = dataclasses.replace(secret, revoked=True)
            case planner.DeleteSecret():
                self.secrets.pop(a.target, None)
            case planner.Adopt(object_kind=kind) if (kind, a.target) in self.children:
                if self.child_owners.get((kind, a.target)) is not None:
                    raise Unsafe(f"adopting {kind} {a.target}, which is owned")
                self.child_owners[(kind, a.target)] = self.ref.uid
            case planner.Adopt(object_kind=kind):
                if kind == "PersistentVolumeClaim":
                    if self.pvcs[a.target].owner is not None and a.target not in self.orphaned:
                        raise Unsafe(f"adopting PersistentVolumeClaim {a.target}, which is owned")
                    self.pvcs[a.target].owner = self.ref.uid
                elif a.target not in self.orphaned:
                    raise Unsafe(f"adopting {kind} {a.target}, which is owned")
                self.orphaned.discard(a.target)
            case planner.ReleasePVC():
                self.pvcs[a.target].owner = None
            case planner.LabelPVC(cluster_id=cid):
                pvc = self.pvcs[a.target]
                if pvc.cluster_id != cid:
                    raise Unsafe(f"labelling {a.target} with {cid}: it holds {pvc.cluster_id}")
                pvc.label_cid = cid
            case planner.ClearAnnotation(key=annotation):
                self.annotations.pop(annotation, None)
            case planner.ExpandPVC(size=size):
                if not self.volume_expansion:
                    raise Unsafe(f"expanding {a.target}: the StorageClass does not allow it (the API server refuses)")
                if spec_bytes(size) < spec_bytes(self.pvcs[a.target].size):
                    raise Unsafe(f"shrinking {a.target}")
                self.pvcs[a.target].size = size
            case _:
                assert_never(a)

    # ---- one operator pass ----
    def plan(self) -> planner.Plan:
        status = ClusterStatus.from_raw(self.status_raw)
        spec, problems, applied = read_spec(self.spec_raw, status.applied_spec)
        return planner.plan(self.ref, spec, problems, self.generation, status, self.observe(), applied_spec=applied,
                            directives=read_directives(self.annotations))

    def operator_pass(self, *, crash_before_action: bool = False) -> planner.Plan:
        p = self.plan()
        # the status goes through JSON like through the API server
        self.status_raw = json.loads(json.dumps(p.status.to_raw()))
        self.events.extend(f"{e.type} {e.reason}: {e.message}" for e in p.events)
        if p.action is not None and not crash_before_action:
            if self.before_recheck is not None:
                self.before_recheck(p.action)
            why = self.recheck(p.action)
            if why is not None:
                self.held.append((p.action, why))
                self.events.append(f"Warning WaitingForQuorum: {p.action.kind} {p.action.target} held: {why}")
                return p
            self.action_events.append(f"{p.action.event_type} {p.action.reason}: {p.action.message}")
            self.apply(p.action)
        return p

    def recheck(self, a: planner.Action) -> str | None:
        """As ``Reconciler.recheck``: a guarded step is checked again on a fresh view of the leader, as its last
        poll would see it (every counted voter must have answered within the live bound)."""
        guard = a.guard if isinstance(a, planner.DeletePod | planner.Decommission) else None
        if guard is None:
            return None
        return guard.why_not(self.observe().ring, guard.live_bound or 0.0)

    @property
    def status(self) -> ClusterStatus:
        return ClusterStatus.from_raw(self.status_raw)

    def condition(self, type_: str) -> str | None:
        c = self.status.condition(type_)
        return c.status if c else None

    def settled(self) -> bool:
        st = self.status
        return self.condition("Ready") == "True" and st.current_operation is None

    def quiet(self) -> bool:
        """The next pass would neither act nor start an operation."""
        p = self.plan()
        return p.action is None and p.status.current_operation is None

    def run(self, max_passes: int = 400, *, until: Callable[[World], bool] | None = None,
            crash: Callable[[int], bool] | None = None) -> int:
        """Passes until ``until`` (default: Ready with nothing to do) holds; returns the passes taken."""
        done = until or (lambda w: w.settled() and w.quiet())
        for i in range(max_passes):
            self.step()
            self.operator_pass(crash_before_action=bool(crash and crash(i)))
            self.now += datetime.timedelta(seconds=1)
            if done(self):
                return i + 1
        raise AssertionError(
            f"did not converge in {max_passes} passes: phase={self.status.phase} op={self.status.current_operation} "
            f"conditions={[(c.type, c.status, c.reason, c.message) for c in self.status.conditions]}"
        )

    # ---- faults ----
    def kill_pod(self, member: str) -> None:
        self.pods.pop(member, None)

    def delete_pvc_and_pod(self, member: str) -> None:
        self.pods.pop(member, None)
        self.pvcs.pop(naming.pvc_name(member), None)

    def orphan_and_recreate(self) -> None:
        """``kubectl delete oscm --cascade=orphan`` then the same resource created again: everything stays (Pods,
        volumes, Secrets, the running ring) but owned by nothing, and the new resource has a new uid and no status."""
        self.orphaned = set(self.pods) | set(self.pvcs) | set(self.secrets)
        self.child_owners = {key: None for key in self.child_owners}  # the garbage collector removes the references
        self.ref = dataclasses.replace(self.ref, uid=self.ref.uid + "-new")
        self.status_raw = {}
        self.events = []
        self.actions = []

    def delete_cluster_and_recreate(self, spec: dict[str, Any]) -> None:
        """``kubectl delete oscm`` (the garbage collector removes what the resource owns: every Pod, its owned volumes
        and Secrets; the SCMs stop), then a new resource of the same name with ``spec``."""
        self.pods.clear()
        self.leader = None
        for n, v in list(self.pvcs.items()):
            if v.owner == self.ref.uid and n not in self.orphaned:
                del self.pvcs[n]
        self.secrets = {n: v for n, v in self.secrets.items() if n == naming.root_ca_secret_name(self.ref.name)}
        for key in [k for k, owner in self.child_owners.items() if owner == self.ref.uid]:
            del self.children[key], self.child_owners[key]
        self.ref = dataclasses.replace(self.ref, uid=self.ref.uid + "-new")
        self.spec_raw = spec
        self.status_raw = {}
        self.events = []
        self.actions = []

    def member_names(self) -> list[str]:
        return [m.name for m in self.status.members]

    def leader_member(self) -> str | None:
        return self.member_of(self.leader) if self.leader else None

"""Owned objects, volumes and level repairs (concerns 4 and 5): the ConfigMap, Services and PodDisruptionBudget
as the builders want them; adopting an existing ring or retained volumes found in place; owner references;
volumes released, labelled and expanded as ``spec.storage`` wants; a recorded member's missing volume or Pod
(and which init container its Pod runs). Pure."""

from __future__ import annotations

from ozone_scm_operator import builders, naming
from ozone_scm_operator.builders import Body
from ozone_scm_operator.model import (
    CREATING,
    JOINED,
    JOINING,
    LEAVING,
    OP_BOOTSTRAP,
    OP_RECOVER,
    MemberStatus,
)
from ozone_scm_operator.planner.actions import (
    Action,
    Adopt,
    Apply,
    CreatePod,
    CreatePVC,
    DeleteObject,
    ExpandPVC,
    LabelPVC,
    ReleasePVC,
)
from ozone_scm_operator.planner.passes import _admissible, _Pass
from ozone_scm_operator.planner.restore import _restore_source
from ozone_scm_operator.spec import (
    quantity_bytes,
)


def _pdb_max_unavailable(p: _Pass) -> int:
    """One voluntary disruption per tolerable failure ((n-1)/2), minus members already down or catching up;
    none during an operation."""
    joined = p.members(JOINED, LEAVING)
    if p.op is not None:
        return 0
    tolerable = (len(joined) - 1) // 2
    down = sum(1 for m in joined if not p.healthy(m))
    return max(0, tolerable - down)


def _children(p: _Pass) -> Action | None:
    names = [m.name for m in p.status.members]
    desired: list[Body] = [
        builders.build_configmap(p.ref, p.spec, names, p.status.primordial_member),
        builders.build_headless_service(p.ref),
        builders.build_client_service(p.ref, p.spec),
    ]
    if p.spec.pdb_enabled:
        desired.append(builders.build_pdb(p.ref, _pdb_max_unavailable(p)))
    for body in desired:
        key = (body["kind"], body["metadata"]["name"])
        want = body["metadata"]["annotations"][naming.ANN_CONTENT_HASH]
        have = p.obs.children.get(key, "<absent>")
        # applied again also when its content is right but this resource is not its controller (its owner reference
        # removed): the applied body carries it
        if have != want or p.obs.child_owners.get(key) != p.ref.uid:
            verb = "creating" if have == "<absent>" else "updating"
            return Apply(
                target=key[1],
                reason=f"Apply{key[0]}",
                message=f"{verb} {key[0]} {key[1]}",
                body=body,
            )
    pdb_key = ("PodDisruptionBudget", naming.pdb_name(p.ref.name))
    if not p.spec.pdb_enabled and pdb_key in p.obs.children:
        return DeleteObject(
            target=pdb_key[1],
            reason="DeletePodDisruptionBudget",
            message=f"deleting PodDisruptionBudget {pdb_key[1]} (spec.podDisruptionBudget.enabled=false)",
            object_kind="PodDisruptionBudget",
        )
    return None


def _found_existing(p: _Pass) -> bool:
    """A resource with no member recorded, over the Pods and volumes of an existing ring of the same name (e.g.
    re-created after ``kubectl delete --cascade=orphan``): adopt that ring as the leader describes it -- its cluster
    ID, and each voter (mapped to its member by ``ozone.scm.node.id``) as a joined member -- instead of bootstrapping
    a second ring over it. Volumes the leader does not list are neither adopted nor touched. Returns False when
    there is nothing of this cluster's name."""
    name = p.ref.name
    found = {n for n in p.obs.pods if naming.member_index(name, n) is not None}
    found |= {v.removesuffix("-data") for v in p.obs.pvcs if v.endswith("-data")
              and naming.member_index(name, v.removesuffix("-data")) is not None}
    if not found:
        return False
    ring = p.obs.ring
    leader = next((s for s in p.obs.scms.values() if ring is not None and s.scm_id == ring.leader_scm_id), None)
    running = [n for n in found if n in p.obs.pods]
    if not running and p.spec.storage.adopt_cluster_id:
        return _adopt_retained(p, found)
    if ring is None or leader is None:
        p.note(
            "NoLeader",
            f"found the Pods or volumes of an existing ring named {name} ({', '.join(sorted(found))}); waiting for one "
            "of its SCMs to lead and answer before adopting it (nothing is created over existing volumes). Volumes "
            "kept by reclaimPolicy Retain are adopted with spec.storage.adoptClusterID set to the cluster ID they "
            f"are labelled with ({naming.LABEL_CLUSTER_ID}); delete those PersistentVolumeClaims to start a new "
            "ring instead",
        )
        return True
    adopted: list[MemberStatus] = []
    for peer in ring.voters:
        member = peer.node_id or peer.host.split(".", 1)[0]
        index = naming.member_index(name, member)
        if index is None:
            continue
        adopted.append(MemberStatus(name=member, index=index, state=JOINED, scm_id=peer.scm_id,
                                    cluster_id=leader.cluster_id))
    if not adopted:
        p.note("NoLeader", f"the SCMs found under {name} lead a ring whose members are not named {name}-<index>")
        return True
    adopted.sort(key=lambda m: m.index)
    indexes = [i for n in found if (i := naming.member_index(name, n)) is not None]
    p.set_status(
        cluster_id=leader.cluster_id,
        primordial_member=adopted[0].name,
        members=tuple(adopted),
        next_member_index=max([p.status.next_member_index, *(i + 1 for i in indexes)]),
    )
    left = sorted(found - {m.name for m in adopted})
    p.adopted = (
        f"adopted the existing ring of cluster {leader.cluster_id} (members {', '.join(m.name for m in adopted)}, "
        f"leader {next((m.name for m in adopted if m.scm_id == ring.leader_scm_id), '?')})"
        + (f"; not in the ring, left untouched: {', '.join(left)}" if left else "")
    )
    return True


def _adopt_retained(p: _Pass, found: set[str]) -> bool:
    """Volumes kept by reclaimPolicy Retain, no Pod running: with ``spec.storage.adoptClusterID`` they become the
    members of this resource, but only if every one of them is labelled with that cluster ID (one that is not is
    another cluster's data: ForeignVolume, and nothing starts). Their Pods then start with ``scm --bootstrap``,
    which on an initialised volume starts the SCM on its own data; the ring forms again from the Raft logs."""
    want = p.spec.storage.adopt_cluster_id
    name = p.ref.name
    vols = {n: p.obs.pvcs.get(naming.pvc_name(n)) for n in sorted(found)}
    foreign = sorted(f"{v.name} ({v.cluster_id or 'no cluster ID label'})" for v in vols.values()
                     if v is not None and v.cluster_id != want)
    missing = sorted(n for n, v in vols.items() if v is None)
    if foreign or missing:
        p.note(
            "ForeignVolume",
            f"spec.storage.adoptClusterID is {want}, but "
            + "; ".join(([f"these volumes hold other data: {', '.join(foreign)}"] if foreign else [])
                        + ([f"these members have a Pod but no volume: {', '.join(missing)}"] if missing else []))
            + ". Nothing was adopted, started or deleted: fix adoptClusterID, or move those PersistentVolumeClaims "
            "away",
        )
        return True
    members = tuple(
        MemberStatus(name=n, index=i, state=JOINED, cluster_id=want)
        for n in sorted(found, key=lambda n: naming.member_index(name, n) or 0)
        if (i := naming.member_index(name, n)) is not None
    )
    p.set_status(
        cluster_id=want,
        primordial_member=members[0].name,
        members=members,
        next_member_index=max([p.status.next_member_index, *(m.index + 1 for m in members)]),
    )
    p.adopted = f"adopted the retained volumes of cluster {want} ({', '.join(m.name for m in members)})"
    return True


def _ownership(p: _Pass) -> Action | None:
    """Objects of recorded members (Pods, volumes), the cluster's Secrets and the audit's report volume that nothing
    owns -- left by a deleted resource with ``--cascade=orphan`` and adopted -- get this resource as their controller
    owner, so deleting it later removes them: a member's once its SCM answered with the recorded cluster ID (a volume
    holding another cluster's data is never owned, so never deleted with the resource); the root CA Secret
    deliberately never. (The ConfigMap, Services, PDB and audit CronJob are applied again with the owner reference
    by ``_children`` and ``_audit``.) Until all of them are owned the cluster is not Ready (``_unowned``)."""
    uid = p.ref.uid
    for m in p.status.members:
        scm = p.obs.scms.get(m.name)
        if scm is None or scm.cluster_id != p.status.cluster_id:
            continue  # owned only once its SCM answered with this cluster's ID: a foreign volume is never owned
        pod = p.obs.pods.get(m.name)
        if pod is not None and pod.controller_uid is None and not pod.deleting:
            return Adopt(
                target=m.name,
                reason="AdoptingPod",
                message=f"adopting Pod {m.name} (owned by nothing)",
                object_kind="Pod",
            )
        pvc = p.obs.pvcs.get(naming.pvc_name(m.name))
        if (pvc is not None and pvc.controller_uid is None and not pvc.deleting
                and p.spec.storage.reclaim_policy == "Delete"):
            return Adopt(
                target=pvc.name,
                reason="AdoptingVolume",
                message=f"adopting PersistentVolumeClaim {pvc.name} of member {m.name} (owned by nothing)",
                object_kind="PersistentVolumeClaim",
            )
    root = naming.root_ca_secret_name(p.ref.name)
    for secret in p.obs.secrets.values():
        if secret.name != root and secret.controller_uid is None and uid:
            return Adopt(
                target=secret.name,
                reason="AdoptingSecret",
                message=f"adopting Secret {secret.name} (owned by nothing)",
                object_kind="Secret",
            )
    report = ("PersistentVolumeClaim", naming.audit_pvc_name(p.ref.name))
    if report in p.obs.children and p.obs.child_owners.get(report) is None and uid:
        return Adopt(
            target=report[1],
            reason="AdoptingVolume",
            message=f"adopting PersistentVolumeClaim {report[1]}, the audit's report volume (owned by nothing)",
            object_kind="PersistentVolumeClaim",
        )
    return None


def _unowned(p: _Pass) -> list[str]:
    """The objects this resource should control that do not carry its controller owner reference (``kind name``,
    in a fixed order): the Pod of every recorded member, its volume under ``storage.reclaimPolicy: Delete``, the
    cluster's Secrets but the root CA, the ConfigMap, Services, PDB and the audit's CronJob and report volume (not
    the backup volume, which outlives the cluster). Objects being deleted do not count. While any is left the cluster
    is not Ready: deleting the resource then would leave it behind (``_ownership`` and ``_children`` adopt them)."""
    uid = p.ref.uid
    out: list[str] = []
    for m in p.status.members:
        pod = p.obs.pods.get(m.name)
        if pod is not None and not pod.deleting and pod.controller_uid != uid:
            out.append(f"Pod {pod.name}")
        pvc = p.obs.pvcs.get(naming.pvc_name(m.name))
        if (pvc is not None and not pvc.deleting and p.spec.storage.reclaim_policy == "Delete"
                and pvc.controller_uid != uid):
            out.append(f"PersistentVolumeClaim {pvc.name}")
    root = naming.root_ca_secret_name(p.ref.name)
    out += [f"Secret {s.name}" for s in sorted(p.obs.secrets.values(), key=lambda s: s.name)
            if s.name != root and s.controller_uid != uid]
    backup = ("PersistentVolumeClaim", naming.backup_pvc_name(p.ref.name))
    out += [f"{kind} {name}" for kind, name in sorted(p.obs.children)
            if (kind, name) != backup and p.obs.child_owners.get((kind, name)) != uid]
    return out


def _volumes(p: _Pass) -> Action | None:
    """The members' volumes as ``spec.storage`` wants them: under reclaimPolicy Retain owned by nothing (so deleting
    the resource keeps them), labelled with the cluster ID once the member's SCM answered with it (a later resource
    adopts them by that label), and as large as ``storage.size`` (expanded where the StorageClass allows it)."""
    retain = p.spec.storage.reclaim_policy == "Retain"
    want = p.spec.storage.size
    small: list[str] = []
    for m in p.status.members:
        pvc = p.obs.pvcs.get(naming.pvc_name(m.name))
        if pvc is None or pvc.deleting:
            continue
        if retain and pvc.controller_uid is not None and pvc.controller_uid == p.ref.uid:
            return ReleasePVC(
                target=pvc.name,
                reason="RetainingVolume",
                message=f"releasing PersistentVolumeClaim {pvc.name} from the cluster's ownership "
                          "(storage.reclaimPolicy Retain: it outlives the OzoneSCMCluster)",
            )
        scm = p.obs.scms.get(m.name)
        cid = p.status.cluster_id
        if cid and pvc.cluster_id != cid and scm is not None and scm.cluster_id == cid:
            return LabelPVC(
                target=pvc.name,
                reason="LabellingVolume",
                message=f"labelling PersistentVolumeClaim {pvc.name} with cluster ID {cid}",
                cluster_id=cid,
            )
        if pvc.size and pvc.size != want and quantity_bytes(pvc.size) < quantity_bytes(want):
            small.append(pvc.name)
    if small:
        if p.obs.volume_expansion is False:
            p.note(
                "VolumeExpansion",
                f"storage.size asks for {want} but the StorageClass of {', '.join(small)} does not allow volume "
                "expansion (allowVolumeExpansion is not true); the volumes keep their size and nothing is deleted. "
                "Set allowVolumeExpansion on the StorageClass (if its provisioner supports it)",
            )
            return None
        return ExpandPVC(
            target=small[0],
            reason="ExpandingVolume",
            message=f"expanding PersistentVolumeClaim {small[0]} to {want}",
            size=want,
        )
    return None


def _init_mode(p: _Pass, m: MemberStatus) -> str:
    op = p.op
    if op is not None and op.type == OP_RECOVER and m.name == op.member and op.step in ("StopSurvivor", "Recover"):
        return builders.INIT_MODE_RECOVER
    first_start = (
        m.name == p.status.primordial_member
        and p.status.cluster_id is None
        and m.state == CREATING
        and op is not None
        and op.type == OP_BOOTSTRAP
    )
    if not first_start:
        return builders.INIT_MODE_BOOTSTRAP
    if p.spec.bootstrap.from_ozone is not None:
        return builders.INIT_MODE_MIGRATE
    return builders.INIT_MODE_RESTORE if p.spec.bootstrap.from_backup else builders.INIT_MODE_INIT


def _repairs(p: _Pass) -> Action | None:
    for m in p.members(CREATING, JOINING, JOINED):
        pvc_name = naming.pvc_name(m.name)
        pvc = p.obs.pvcs.get(pvc_name)
        if pvc is None and m.state in (CREATING, JOINING):
            return CreatePVC(
                target=pvc_name,
                reason="CreatingVolume",
                message=f"creating PersistentVolumeClaim {pvc_name} for member {m.name}",
                body=builders.build_pvc(p.ref, p.spec, m.name),
            )
        if pvc is None or pvc.deleting:
            continue  # a joined member's volume is gone: replacement (below), never a fresh Pod on empty disk
        if p.spec.security.operator_ca and naming.member_tls_secret_name(m.name) not in p.obs.secrets:
            continue  # its certificate first (blocked while the root CA is missing)
        if p.spec.security.enabled and naming.enrollment_secret_name(p.ref.name) not in p.obs.secrets:
            continue
        if p.spec.security.scm_ca and naming.admin_csr_secret_name(p.ref.name) not in p.obs.secrets:
            continue  # mounted by every member; the primordial signs it at --init
        if m.name not in p.obs.pods:
            mode = _init_mode(p, m)
            source = None
            if mode == builders.INIT_MODE_RESTORE:
                source, why = _restore_source(p)
                if why is not None:
                    p.note("RestoreSource", why)
                    return None
            ozone = p.spec.bootstrap.from_ozone if mode == builders.INIT_MODE_MIGRATE else None
            what = {builders.INIT_MODE_INIT: "scm --init (primordial)",
                    builders.INIT_MODE_RECOVER: "scm --recover (quorum recovery)",
                    builders.INIT_MODE_RESTORE: f"scm --restore from {p.spec.bootstrap.from_backup}",
                    builders.INIT_MODE_MIGRATE: "migrate from-ozone from PersistentVolumeClaim "
                                                f"{ozone.claim_name if ozone else ''}",
                    }.get(mode, "scm --bootstrap")
            revision = p.member_revision(m.name)
            body = builders.build_pod(p.ref, p.spec, m.name, mode, source, revision, ozone)
            if not _admissible(p, f"Pod {m.name}", body["spec"]):
                return None
            return CreatePod(
                target=m.name,
                reason="CreatingPod",
                message=f"creating Pod {m.name} ({what}, revision {revision})",
                body=body,
            )
    return None

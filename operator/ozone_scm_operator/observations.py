"""Raw Kubernetes objects -> the values one reconcile pass observes (pure: no I/O, no clock).

The reconciler's ``observe`` reads the objects (from the watch-fed store or the API server) and hands them here; the
planner reads the :class:`~ozone_scm_operator.model.Observed` value these functions build, and the unit tier's
simulated world (``tests/operator/unit/sim.py``) builds the same values from its own objects with them. What a step
needs beyond the planner's view (an object's ``ownerReferences`` and ``resourceVersion`` to patch it, the data of the
cluster's Secrets to sign with) is kept in :class:`Reads`, and the key material is parsed by the functions at the
end of this module.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import audit_status, backup_builders, builders, certs, naming
from ozone_scm_operator.model import (
    BackupObs,
    ContainerObs,
    JobObs,
    PodObs,
    PVCObs,
    RootCAObs,
    SecretObs,
    parse_time,
)

Body = dict[str, Any]


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


def child_entries(kind: str, objs: Iterable[Body]) -> tuple[dict[tuple[str, str], str | None],
                                                            dict[tuple[str, str], str | None]]:
    """``Observed.children`` and ``Observed.child_owners`` entries of owned objects of one kind: each object's
    content hash annotation, and the uid of its controller owner."""
    hashes: dict[tuple[str, str], str | None] = {}
    owners: dict[tuple[str, str], str | None] = {}
    for obj in objs:
        meta = obj["metadata"]
        hashes[(kind, meta["name"])] = (meta.get("annotations") or {}).get(naming.ANN_CONTENT_HASH)
        owners[(kind, meta["name"])] = controller_uid(meta)
    return hashes, owners


# ---------------------------------------------------------------------------------------------------------------
# what a step needs beyond the planner's view
# ---------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reads:
    """What one pass read beyond :class:`~ozone_scm_operator.model.Observed`, for the steps that write from it:

    - ``metadata``: (kind, name) -> the metadata of each object observed (its ``ownerReferences`` and
      ``resourceVersion``: a patch that replaces a list is guarded by the version observed, so it fails with 409
      when the object changed since, and the next pass plans again from the new version);
    - ``secret_data``: the data of the Secrets whose key material a step signs or proves with (the root CA, the
      operator's client Secret, the enrolment Secret, a restore's source root CA), by name. Never logged
      (``repr=False``), never written into status."""

    metadata: Mapping[tuple[str, str], Body] = dataclasses.field(default_factory=dict)
    secret_data: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict, repr=False)

    def meta(self, kind: str, name: str) -> Body:
        """The observed metadata of ``kind``/``name``; RuntimeError when the pass did not see it."""
        found = self.metadata.get((kind, name))
        if found is None:
            raise RuntimeError(f"{kind} {name} is gone")
        return found


def metadata_entries(kind: str, objs: Iterable[Body]) -> dict[tuple[str, str], Body]:
    """``Reads.metadata`` entries of the objects of one kind."""
    return {(kind, o["metadata"]["name"]): dict(o["metadata"]) for o in objs}


def _data(reads: Reads, name: str) -> Mapping[str, str]:
    return reads.secret_data.get(name) or {}


def root_pair(reads: Reads, name: str) -> certs.KeyPair:
    """The root CA held in Secret ``name`` (its certificate and key); RuntimeError when it holds none."""
    data = _data(reads, name)
    if certs.ROOT_CERT not in data or certs.ROOT_KEY not in data:
        raise RuntimeError(f"Secret {name} has no root CA ({certs.ROOT_CERT}, {certs.ROOT_KEY})")
    return certs.load_pair(base64.b64decode(data[certs.ROOT_CERT]), base64.b64decode(data[certs.ROOT_KEY]))


def restore_root(reads: Reads, name: str, fingerprint: str) -> certs.KeyPair:
    """A secure restore's root CA: the one in Secret ``name``, checked again against the ``fingerprint`` the plan
    (the backup) expects."""
    root = root_pair(reads, name)
    if root.fingerprint != fingerprint:
        raise RuntimeError(f"Secret {name} changed under the restore (root CA {root.fingerprint}, "
                           f"expected {fingerprint})")
    return root


def client_key(reads: Reads, name: str) -> ec.EllipticCurvePrivateKey:
    """The operator's private key, from its client Secret ``name``."""
    pem = certs.decode_secret_field(_data(reads, name), builders.TLS_KEY)
    if pem is None:
        raise RuntimeError(f"Secret {name} has no {builders.TLS_KEY}")
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise RuntimeError(f"Secret {name}: {builders.TLS_KEY} is not an EC private key")
    return key


def enrollment_proof(reads: Reads, name: str) -> bytes:
    """The secret the operator proves its enrolment with (CA mode scm), from the enrolment Secret ``name``."""
    proof = certs.decode_secret_field(_data(reads, name), naming.ENROLLMENT_SCM)
    if proof is None:
        raise RuntimeError(f"Secret {name} has no {naming.ENROLLMENT_SCM}")
    return proof


@dataclasses.dataclass(frozen=True)
class ClientIdentity:
    """The operator's TLS identity as its client Secret holds it: the chain below the root, the key, the root."""

    serial: str
    chain: tuple[x509.Certificate, ...]
    key: ec.EllipticCurvePrivateKey
    root: x509.Certificate


def client_identity(reads: Reads, name: str, serial: str) -> ClientIdentity | None:
    """The operator's TLS identity from its client Secret ``name`` (``serial``: its certificate serial annotation);
    None while no certificate is issued (CA mode operator starts no SCM before it is; CA mode scm holds only the key
    until the primordial signed it)."""
    data = _data(reads, name)
    if builders.TLS_CERT not in data:
        return None
    chain = x509.load_pem_x509_certificates(base64.b64decode(data[builders.TLS_CERT]))
    root = x509.load_pem_x509_certificate(base64.b64decode(data[builders.TLS_CA]))
    key = serialization.load_pem_private_key(base64.b64decode(data[builders.TLS_KEY]), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise RuntimeError(f"Secret {name}: {builders.TLS_KEY} is not an EC private key")
    return ClientIdentity(serial, tuple(c for c in chain if c != root), key, root)

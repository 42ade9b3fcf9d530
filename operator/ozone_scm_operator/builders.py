"""Pure builders: spec (+ the members recorded in status) -> the bodies of the Kubernetes objects of one cluster.

Called by the planner (to compare what exists with what should) and by the reconciler (to create or replace
objects). No I/O, no clock. Every body carries owner references to the ``OzoneSCMCluster`` (so Kubernetes'
garbage collector removes them with it) and, except Pods and PVCs, a ``content-hash`` annotation over the rest
of the body, which the planner compares with the live object's to decide whether to rewrite it.

What the member Pods look like (the member's name is its Pod's name and its ``ozone.scm.node.id``):

* ``hostname=<member>``, ``subdomain=<cluster>-headless``: the member's stable DNS name
  ``<member>.<cluster>-headless.<ns>.svc.<domain>`` is ``ozone.scm.address.<svc>.<member>`` in ozone-site.xml; the
  headless Service publishes not-ready addresses, so members resolve each other while they bootstrap;
* one init container: ``ozone-scm scm --init`` for the primordial member's first start only (while the ring has no
  cluster ID yet), ``ozone-scm scm --bootstrap`` for every other start of every member (on the primordial member
  that is a no-op: if its volume were ever empty it would fail instead of creating a second cluster); during an
  operator-driven quorum recovery the survivor's Pod runs ``ozone-scm scm --recover`` instead, once; a ring
  created from a backup (``spec.bootstrap.fromBackup``) has its primordial run ``ozone-scm scm --restore DIR``
  instead of ``--init``, with the backup's volume mounted read-only at ``/backups``; a ring created from Ozone's
  own SCM (``spec.bootstrap.fromOzone``) has its primordial run ``ozone-scm migrate from-ozone`` with Ozone's
  metadata volume mounted read-only at ``/ozone-scm``;
* the SCM container ``ozone-scm scm``: its first start after ``--bootstrap`` asks the leader to add it (AddSCM);
  readiness is ``/ready?member=true`` (a caught-up Raft member, whatever the safemode), liveness ``/health``;
* volumes: the member's PVC at ``/data`` (``ozone.metadata.dirs=/data/metadata``), the cluster ConfigMap's
  ``ozone-site.xml`` at ``/etc/ozone`` (``OZONE_CONF_DIR``), and in CA mode ``operator`` the member's certificate
  Secret at ``/var/run/ozone-scm/tls``.

The ConfigMap lists every member recorded in status (so the operator rewrites it, and thereby tells the running
members about a joiner, before it creates the joiner's Pod). Its member list is deliberately NOT part of the Pod
revision: membership lives in the Raft log, and re-rolling the ring on every scale step would be pointless
disruption. User-visible settings (image, ``ozoneSite``, resources, scheduling, security) are, so changing them
rolls the members.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from ozone_scm_operator import API_GROUP, API_VERSION, KIND, naming
from ozone_scm_operator.spec import BackupS3, ClusterSpec, OzoneSource

Body = dict[str, Any]

INIT_MODE_INIT = "init"
INIT_MODE_BOOTSTRAP = "bootstrap"
INIT_MODE_RECOVER = "recover"  # quorum recovery: the survivor's init container runs scm --recover (once)
INIT_MODE_RESTORE = "restore"  # spec.bootstrap.fromBackup: the primordial's first start runs scm --restore
INIT_MODE_MIGRATE = "migrate"  # spec.bootstrap.fromOzone: the primordial's first start runs migrate from-ozone
INIT_MODES = (INIT_MODE_INIT, INIT_MODE_BOOTSTRAP, INIT_MODE_RECOVER, INIT_MODE_RESTORE, INIT_MODE_MIGRATE)
# the init modes after which the primordial member is restarted with --bootstrap once it leads (they run once)
ONE_SHOT_INIT_MODES = (INIT_MODE_RESTORE, INIT_MODE_MIGRATE)


@dataclasses.dataclass(frozen=True)
class RestoreSource:
    """Where the primordial member restores from: a backup directory (``/backups/...``) on the volume ``claim``
    (mounted read-only at ``/backups``), checked to belong to ``cluster_id`` when known. With ``s3`` (the endpoint
    and keys) ``path`` is an ``s3://`` URL and ``claim`` is empty: an init container ``download`` fetches and
    verifies the backup into the Pod's ``/scratch`` (an emptyDir) before ``scm --restore`` reads it there."""

    claim: str
    path: str
    cluster_id: str | None = None
    s3: BackupS3 | None = None
TERMINATION_LOG = "/dev/termination-log"

# TLS file names inside the member certificate Secret (CA mode operator)
TLS_CA = "ca.crt"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"


@dataclasses.dataclass(frozen=True)
class ClusterRef:
    """Identity of the ``OzoneSCMCluster`` being reconciled, and operator-wide settings the bodies depend on."""

    name: str
    namespace: str
    uid: str
    cluster_domain: str = "cluster.local"

    def owner_reference(self) -> Body:
        return {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def metadata(self, name: str, labels: Mapping[str, str] | None = None) -> Body:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": dict(labels if labels is not None else naming.common_labels(self.name)),
            "ownerReferences": [self.owner_reference()],
        }

    def host(self, member: str) -> str:
        return naming.member_host(member, self.name, self.namespace, self.cluster_domain)


def content_hash(body: Mapping[str, Any]) -> str:
    """sha256 (16 hex digits) of a body's canonical JSON, ignoring its own content-hash annotation."""
    clean = json.loads(json.dumps(body, sort_keys=True, default=str))
    meta = clean.get("metadata", {})
    anns = meta.get("annotations", {})
    anns.pop(naming.ANN_CONTENT_HASH, None)
    if not anns:
        meta.pop("annotations", None)
    return hashlib.sha256(json.dumps(clean, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def with_content_hash(body: Body) -> Body:
    body.setdefault("metadata", {}).setdefault("annotations", {})[naming.ANN_CONTENT_HASH] = content_hash(body)
    return body


# ---------------------------------------------------------------------------------------------------------------
# ozone-site.xml
# ---------------------------------------------------------------------------------------------------------------


def static_properties(spec: ClusterSpec) -> dict[str, str]:
    """The properties that do not depend on membership: user overrides and the security switches. Part of the
    Pod revision (a change rolls the members)."""
    props: dict[str, str] = {
        "ozone.metadata.dirs": naming.METADATA_DIR,
        # every port named explicitly: Ozone's keys (Hadoop RPC), our gRPC keys, Raft and inter-SCM
        **{key: str(naming.PORTS[name]) for name, key in naming.PORT_KEYS.items()},
        "ozone.scm.http-address": f"0.0.0.0:{naming.PORTS['http']}",
        "ozone.security.enabled": "true" if spec.security.enabled else "false",
    }
    if spec.security.enabled:
        props["hdds.grpc.tls.enabled"] = "true"
        props["ozone.scm.security.enrollment.datanode.secret.file"] = (
            f"{naming.ENROLLMENT_DIR}/{naming.ENROLLMENT_DATANODE}"
        )
    if spec.security.enabled:
        props.update(
            {
                # the operator's keys are EC P-256 (its sub-CAs in CA mode operator, its admin key in both modes);
                # the SCMs use the same key spec for what they make and sign
                "hdds.key.algo": "EC",
                "hdds.key.len": "256",
                "hdds.x509.signature.algorithm": "SHA256withECDSA",
            }
        )
    if spec.security.scm_ca:
        props.update(
            {
                # the primordial signs the operator's CSR at --init; joiners enrol their sub-CA with the scm secret
                "ozone.scm.security.admin.csr.files": f"{naming.ADMIN_CSR_DIR}/{naming.ADMIN_CSR_FILE}",
                "ozone.scm.security.enrollment.scm.secret.file": f"{naming.ENROLLMENT_DIR}/{naming.ENROLLMENT_SCM}",
            }
        )
    if spec.security.operator_ca:
        props.update(
            {
                "hdds.x509.rootca.certificate.file": f"{naming.TLS_DIR}/{TLS_CA}",
                "hdds.x509.subca.certificate.file": f"{naming.TLS_DIR}/{TLS_CERT}",
                "hdds.x509.subca.private.key.file": f"{naming.TLS_DIR}/{TLS_KEY}",
            }
        )
    for key in sorted(spec.ozone_site):
        props[key] = spec.ozone_site[key]
    kerberos = spec.security.kerberos
    if kerberos is not None:
        # every Hadoop RPC listener authenticates its callers with Kerberos (Ozone's keys; spec.ozoneSite may not
        # set them while spec.security.kerberos does)
        props.update({
            "hadoop.security.authentication": "kerberos",
            "hdds.scm.kerberos.principal": kerberos.principal,
            "hdds.scm.kerberos.keytab.file": f"{naming.KEYTAB_DIR}/{kerberos.keytab_key}",
        })
    if spec.security.enabled:
        # the operator's own client certificate must stay an administrator (transfer, decommission)
        admins = [a.strip() for a in props.get("ozone.administrators", "").split(",") if a.strip()]
        if naming.MANAGER not in admins and "*" not in admins:
            admins.append(naming.MANAGER)
        props["ozone.administrators"] = ",".join(admins)
    return props


def membership_properties(ref: ClusterRef, members: Sequence[str], primordial: str | None) -> dict[str, str]:
    """The HA layout: service id, node list, one address per member, the primordial node."""
    svc = naming.service_id(ref.name)
    props = {
        "ozone.scm.service.ids": svc,
        f"ozone.scm.nodes.{svc}": ",".join(members),
    }
    for m in members:
        props[f"ozone.scm.address.{svc}.{m}"] = ref.host(m)
    if primordial:
        props["ozone.scm.primordial.node.id"] = primordial
    return props


def render_ozone_site(props: Mapping[str, str]) -> str:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<!-- written by ozone-scm-operator; edits are overwritten -->"]
    lines.append("<configuration>")
    for key, value in props.items():
        lines.append(f"  <property><name>{escape(key)}</name><value>{escape(value)}</value></property>")
    lines.append("</configuration>")
    return "\n".join(lines) + "\n"


def build_configmap(ref: ClusterRef, spec: ClusterSpec, members: Sequence[str], primordial: str | None) -> Body:
    props = {**membership_properties(ref, members, primordial), **static_properties(spec)}
    return with_content_hash(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": ref.metadata(naming.configmap_name(ref.name)),
            "data": {"ozone-site.xml": render_ozone_site(props)},
        }
    )


# ---------------------------------------------------------------------------------------------------------------
# Services and the PodDisruptionBudget
# ---------------------------------------------------------------------------------------------------------------


# The client Service: Ozone's protocols over Hadoop RPC and ours over gRPC, both; the web page
CLIENT_SERVICE_PORTS = (
    "client-hadoop", "block-hadoop", "datanode-hadoop", "security-hadoop",
    "client-grpc", "block-grpc", "datanode-grpc", "security-grpc", "http",
)


def _service_ports(names: Sequence[str]) -> list[Body]:
    return [
        {"name": n, "port": naming.PORTS[n], "targetPort": naming.PORTS[n], "protocol": "TCP"} for n in names
    ]


def build_headless_service(ref: ClusterRef) -> Body:
    """Gives each member its DNS name; publishes not-ready addresses so bootstrapping members find each other."""
    return with_content_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": ref.metadata(naming.headless_service_name(ref.name)),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": naming.selector_labels(ref.name),
                "ports": _service_ports(list(naming.PORTS)),
            },
        }
    )


def build_client_service(ref: ClusterRef, spec: ClusterSpec) -> Body:
    """The Service for clients and datanodes (ready members only; the SCM client fails over to the leader)."""
    meta = ref.metadata(naming.client_service_name(ref.name), {**spec.service.labels, **naming.common_labels(ref.name)})
    if spec.service.annotations:
        meta["annotations"] = dict(spec.service.annotations)
    return with_content_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "type": spec.service.type,
                "selector": naming.selector_labels(ref.name),
                "ports": _service_ports(CLIENT_SERVICE_PORTS),
            },
        }
    )


def build_pdb(ref: ClusterRef, max_unavailable: int) -> Body:
    return with_content_hash(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": ref.metadata(naming.pdb_name(ref.name)),
            "spec": {
                "maxUnavailable": max_unavailable,
                "selector": {"matchLabels": naming.selector_labels(ref.name)},
            },
        }
    )


def build_enrollment_secret(ref: ClusterRef, datanode_secret: str, scm_secret: str | None = None) -> Body:
    """The enrolment secrets of a secure cluster (values generated by the caller): the datanodes', and in CA mode
    scm the SCMs' (``ozone.scm.security.enrollment.scm.secret.file``), with which joiners enrol their sub-CA and
    the operator verifies the root CA the primordial created."""
    data = {naming.ENROLLMENT_DATANODE: datanode_secret}
    if scm_secret is not None:
        data[naming.ENROLLMENT_SCM] = scm_secret
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": ref.metadata(naming.enrollment_secret_name(ref.name)),
        "type": "Opaque",
        "stringData": data,
    }


# ---------------------------------------------------------------------------------------------------------------
# member volume and Pod
# ---------------------------------------------------------------------------------------------------------------


def pvc_body(ref: ClusterRef, name: str, labels: dict[str, str], size: str, storage_class: str | None) -> Body:
    """A ReadWriteOnce claim of ``size`` in ``storage_class`` (the cluster's default class when None)."""
    pvc_spec: Body = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        pvc_spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": ref.metadata(name, labels),
        "spec": pvc_spec,
    }


def build_pvc(ref: ClusterRef, spec: ClusterSpec, member: str) -> Body:
    """A member's volume: owned by the cluster (deleted with it) only under ``storage.reclaimPolicy: Delete``; under
    Retain (the default) owned by nothing, so deleting the OzoneSCMCluster keeps it."""
    body = pvc_body(ref, naming.pvc_name(member), naming.member_labels(ref.name, member), spec.storage.size,
                    spec.storage.storage_class_name)
    if spec.storage.reclaim_policy != "Delete":
        del body["metadata"]["ownerReferences"]
    return body


# What the member and audit Pods run as unless ``spec.podSecurityContext``/``spec.containerSecurityContext`` say
# otherwise (merged key by key over these): Pod Security ``restricted`` (seccomp RuntimeDefault, non-root, no
# privilege escalation, every capability dropped) with a read-only root filesystem. uid/gid 1000 is the image's
# user; fsGroup 1000 makes the volumes (the member's PVC, the audit reports) writable by it.
RUN_AS = 1000
TMP_DIR = "/tmp"


def pod_security_context(spec: ClusterSpec) -> Body:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
        **spec.pod_security_context,
    }


def container_security_context(spec: ClusterSpec) -> Body:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        **spec.container_security_context,
    }


def s3_env(s3: BackupS3) -> list[Body]:
    """The S3 keys of ``spec.backup.s3`` (its credentials Secret) as the standard environment variables
    ``ozone-scm admin scm backup upload|download|delete`` reads."""
    return [{"name": k, "valueFrom": {"secretKeyRef": {"name": s3.credentials_secret, "key": k}}}
            for k in naming.S3_CREDENTIAL_KEYS]


def s3_args(s3: BackupS3) -> list[str]:
    """The endpoint (and CA bundle) flags of ``admin scm backup upload|download|delete``."""
    args = ["--endpoint-url", s3.endpoint]
    if s3.ca_secret:
        args += ["--ca-bundle", f"{naming.S3_CA_DIR}/{naming.S3_CA_KEY}"]
    return args


def s3_ca_volume(s3: BackupS3) -> tuple[list[Body], list[Body]]:
    """(volumes, mounts) of the CA Secret ``spec.backup.s3.caSecret`` (nothing when unset)."""
    if not s3.ca_secret:
        return [], []
    return ([{"name": "s3-ca", "secret": {"secretName": s3.ca_secret}}],
            [{"name": "s3-ca", "mountPath": naming.S3_CA_DIR, "readOnly": True}])


def client_tls_env() -> list[Body]:
    """The environment that makes ``ozone-scm admin ...`` in a Job's Pod present the operator's client certificate
    (its Secret mounted at ``naming.TLS_DIR``; the operator is an administrator). Not shell identifiers: they reach
    the process because the containers exec their command (no ``sh -c``)."""
    return [
        {"name": "OZONE-SITE.XML_hdds.x509.client.certificate.file", "value": f"{naming.TLS_DIR}/{TLS_CERT}"},
        {"name": "OZONE-SITE.XML_hdds.x509.client.private.key.file", "value": f"{naming.TLS_DIR}/{TLS_KEY}"},
    ]


KEYTAB_MODE = 0o400


def kerberos_parts(spec: ClusterSpec) -> tuple[list[Body], list[Body], list[Body]]:
    """(volumes, mounts, env) of ``spec.security.kerberos`` in a member Pod (all empty without it): the keytab
    Secret's one key read-only with mode 0400, the realm's krb5.conf from its ConfigMap (``KRB5_CONFIG``; without
    it the image's /etc/krb5.conf), and MIT Kerberos' replay cache on the writable /tmp (the root filesystem is
    read-only)."""
    kerberos = spec.security.kerberos
    if kerberos is None:
        return [], [], []
    volumes: list[Body] = [{
        "name": "keytab",
        "secret": {"secretName": kerberos.keytab_secret, "defaultMode": KEYTAB_MODE,
                   "items": [{"key": kerberos.keytab_key, "path": kerberos.keytab_key}]},
    }]
    mounts: list[Body] = [{"name": "keytab", "mountPath": naming.KEYTAB_DIR, "readOnly": True}]
    env: list[Body] = [{"name": "KRB5RCACHEDIR", "value": TMP_DIR}]
    if kerberos.krb5_config_map is not None:
        volumes.append({"name": "krb5", "configMap": {
            "name": kerberos.krb5_config_map, "items": [{"key": naming.KRB5_CONF, "path": naming.KRB5_CONF}]}})
        mounts.append({"name": "krb5", "mountPath": naming.KRB5_DIR, "readOnly": True})
        env.append({"name": "KRB5_CONFIG", "value": f"{naming.KRB5_DIR}/{naming.KRB5_CONF}"})
    return volumes, mounts, env


def _template_inputs(spec: ClusterSpec) -> Body:
    """Everything the member Pods are built from that a user can change (the Pod revision's input)."""
    return {
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "imagePullSecrets": list(spec.image_pull_secrets),
        "resources": spec.resources,
        "scheduling": dataclasses.asdict(spec.scheduling),
        "podLabels": dict(spec.pod_labels),
        "podAnnotations": dict(spec.pod_annotations),
        "ozoneSite": static_properties(spec),
        "security": {"enabled": spec.security.enabled, "caMode": spec.security.ca_mode},
    }


# The placeholder identity the Pod template is built for when it is hashed (the revision must not depend on the
# cluster's uid, nor on which member it is)
_TEMPLATE_REF = ClusterRef(name="oscm", namespace="ns", uid="uid")
_TEMPLATE_MEMBER = "oscm-0"


def pod_revision(spec: ClusterSpec, restarted_at: str | None = None) -> str:
    """Hash of the member Pod template: a member whose Pod has another revision is rolled. It covers the user's
    inputs and the Pod the operator builds from them (a placeholder member's, in bootstrap mode, without the
    revision annotation), so a new operator version that builds other Pods rolls the members too.
    ``restarted_at`` (the resource's ``ozone-scm.io/restartedAt``, when set) is folded in, so a restart request
    rolls every member like any other change; without it the revision is what it always was."""
    template = _build_pod(_TEMPLATE_REF, spec, _TEMPLATE_MEMBER, INIT_MODE_BOOTSTRAP, revision="")
    inputs: Body = {"inputs": _template_inputs(spec), "pod": template}
    if restarted_at is not None:
        inputs["restartedAt"] = restarted_at
    data = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:12]


def member_revision(revision: str, member: str, restarted_at: str | None) -> str:
    """The revision one member's Pod must carry: the cluster's, or -- when that member alone was asked to restart
    (``ozone-scm.io/restartedAt.<member>``) -- a hash of the cluster's revision and that request."""
    if restarted_at is None:
        return revision
    return hashlib.sha256(f"{revision}/{member}/{restarted_at}".encode()).hexdigest()[:12]


def _default_affinity(ref: ClusterRef) -> Body:
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": naming.selector_labels(ref.name)},
                    },
                }
            ]
        }
    }


def build_pod(ref: ClusterRef, spec: ClusterSpec, member: str, init_mode: str,
              restore: RestoreSource | None = None, revision: str | None = None,
              migrate: OzoneSource | None = None) -> Body:
    """The member's Pod. ``init_mode`` is ``init`` only for the primordial member's first start (``restore``, with
    ``restore`` given, when the ring is created from a backup), ``recover`` only for the survivor of a lost quorum
    while the operator recovers from it. ``revision``: the revision to stamp (``member_revision``; default the
    spec's own)."""
    if init_mode not in INIT_MODES:
        raise ValueError(f"init_mode must be one of {', '.join(INIT_MODES)}, got {init_mode!r}")
    if (init_mode == INIT_MODE_RESTORE) != (restore is not None):
        raise ValueError("a restore source goes with init_mode restore, and only with it")
    if (init_mode == INIT_MODE_MIGRATE) != (migrate is not None):
        raise ValueError("an Ozone source goes with init_mode migrate, and only with it")
    return _build_pod(ref, spec, member, init_mode, revision if revision is not None else pod_revision(spec), restore,
                      migrate)


def _build_pod(ref: ClusterRef, spec: ClusterSpec, member: str, init_mode: str, revision: str,
               restore: RestoreSource | None = None, migrate: OzoneSource | None = None) -> Body:
    env: list[Body] = [
        {"name": "OZONE_CONF_DIR", "value": naming.CONF_DIR},
        # Not a shell identifier, so it only survives exec (and bash -c), never sh -c: see docs/operations.md.
        {"name": "OZONE-SITE.XML_ozone.scm.node.id", "value": member},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    mounts: list[Body] = [
        {"name": "data", "mountPath": naming.DATA_DIR},
        {"name": "config", "mountPath": naming.CONF_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": TMP_DIR},  # the root filesystem is read-only
    ]
    volumes: list[Body] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": naming.pvc_name(member)}},
        {"name": "config", "configMap": {"name": naming.configmap_name(ref.name)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if spec.security.enabled:
        mounts.append({"name": "enrollment", "mountPath": naming.ENROLLMENT_DIR, "readOnly": True})
        volumes.append({"name": "enrollment", "secret": {"secretName": naming.enrollment_secret_name(ref.name)}})
    if spec.security.scm_ca:
        mounts.append({"name": "admin-csr", "mountPath": naming.ADMIN_CSR_DIR, "readOnly": True})
        volumes.append({"name": "admin-csr", "secret": {"secretName": naming.admin_csr_secret_name(ref.name)}})
    if spec.security.operator_ca:
        mounts.append({"name": "tls", "mountPath": naming.TLS_DIR, "readOnly": True})
        volumes.append({"name": "tls", "secret": {"secretName": naming.member_tls_secret_name(member)}})
    kerberos_volumes, kerberos_mounts, kerberos_env = kerberos_parts(spec)
    volumes.extend(kerberos_volumes)
    mounts.extend(kerberos_mounts)
    env.extend(kerberos_env)
    container_security = container_security_context(spec)
    common = {
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "env": env,
        "volumeMounts": mounts,
        "securityContext": container_security,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    init_command = ["ozone-scm", "scm", f"--{init_mode}"]
    if init_mode == INIT_MODE_BOOTSTRAP:
        init_command += ["--termination-log", TERMINATION_LOG]
    init_mounts = mounts
    download: Body | None = None
    if restore is not None and restore.s3 is not None:
        local = naming.scratch_path(restore.path.rstrip("/").rsplit("/", 1)[-1])
        cid = ["--clusterid", restore.cluster_id] if restore.cluster_id else []
        init_command = ["ozone-scm", "scm", "--restore", local, *cid]
        scratch = {"name": "restore", "mountPath": naming.SCRATCH_DIR}
        init_mounts = [*mounts, {**scratch, "readOnly": True}]
        ca_volumes, ca_mounts = s3_ca_volume(restore.s3)
        volumes.extend([{"name": "restore", "emptyDir": {}}, *ca_volumes])
        download = {
            "name": "download",
            "command": ["ozone-scm", "admin", "scm", "backup", "download", restore.path, local, *cid,
                        *s3_args(restore.s3)],
            **common,
            "env": [*env, *s3_env(restore.s3)],
            "volumeMounts": [*mounts, scratch, *ca_mounts],
        }
    elif restore is not None:
        init_command = ["ozone-scm", "scm", "--restore", restore.path]
        if restore.cluster_id:
            init_command += ["--clusterid", restore.cluster_id]
        init_mounts = [*mounts, {"name": "restore", "mountPath": naming.BACKUP_DIR, "readOnly": True}]
        volumes.append({"name": "restore", "persistentVolumeClaim": {"claimName": restore.claim, "readOnly": True}})
    if migrate is not None:
        # Ozone's SCM metadata directory, read-only: the migration never writes to it
        init_command = ["ozone-scm", "migrate", "from-ozone", "--ozone-db", f"{naming.OZONE_SCM_DIR}/{migrate.db_path}"]
        init_mounts = [*mounts, {"name": "ozone-scm", "mountPath": naming.OZONE_SCM_DIR, "readOnly": True}]
        volumes.append({"name": "ozone-scm",
                        "persistentVolumeClaim": {"claimName": migrate.claim_name, "readOnly": True}})
    init_container = {
        "name": init_mode,
        # a bootstrap refused because the volume holds another cluster's data leaves one fixed line
        # ("ForeignVolume: ...") as the termination message, which the operator reads whole (not a log tail)
        "command": init_command,
        **common,
        "volumeMounts": init_mounts,
    }
    scm_container: Body = {
        "name": "scm",
        "command": ["ozone-scm", "scm"],
        **common,
        "ports": [
            {"name": n, "containerPort": p, "protocol": "TCP"} for n, p in naming.PORTS.items()
        ],
        # probed every second from the start: an SCM serves about a second after it starts, and each member's
        # readiness gates the operator's next step (the same 3-minute startup budget as before)
        "startupProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 1,
            "failureThreshold": 180,
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready?member=true", "port": "http"},
            "periodSeconds": 1,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
    }
    if spec.resources:
        scm_container["resources"] = dict(spec.resources)
        init_container["resources"] = dict(spec.resources)
        if download is not None:
            download["resources"] = dict(spec.resources)
    labels = {**spec.pod_labels, **naming.member_labels(ref.name, member)}
    meta = ref.metadata(member, labels)
    meta["annotations"] = {
        **spec.pod_annotations,
        naming.ANN_REVISION: revision,
        naming.ANN_INIT_MODE: init_mode,
    }
    pod_spec: Body = {
        "hostname": member,
        "subdomain": naming.headless_service_name(ref.name),
        "enableServiceLinks": False,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "securityContext": pod_security_context(spec),
        "automountServiceAccountToken": False,  # an SCM never talks to the Kubernetes API
        "initContainers": [init_container] if download is None else [download, init_container],
        "containers": [scm_container],
        "volumes": volumes,
        "affinity": dict(spec.scheduling.affinity) if spec.scheduling.affinity else _default_affinity(ref),
    }
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    if spec.scheduling.node_selector:
        pod_spec["nodeSelector"] = dict(spec.scheduling.node_selector)
    if spec.scheduling.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.scheduling.tolerations]
    if spec.scheduling.topology_spread_constraints:
        pod_spec["topologySpreadConstraints"] = [dict(t) for t in spec.scheduling.topology_spread_constraints]
    if spec.scheduling.priority_class_name:
        pod_spec["priorityClassName"] = spec.scheduling.priority_class_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}

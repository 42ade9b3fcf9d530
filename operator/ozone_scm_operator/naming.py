"""Names, labels and annotations of everything the operator creates for one ``OzoneSCMCluster``.

Pure. Used by the builders (to name and label objects), the planner (to match observed objects to members)
and the effects layer (to find the objects of one cluster). A member's name is its Pod's name and its SCM's
``ozone.scm.node.id``: ``<cluster>-<index>``, where the index comes from ``status.nextMemberIndex`` and is never
reused, so a replaced member gets a fresh identity (new name, new volume, new scmUuid).
"""

from __future__ import annotations

import hashlib
import re

from ozone_scm_operator import API_GROUP

# Labels
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_CLUSTER = f"{API_GROUP}/cluster"
LABEL_MEMBER = f"{API_GROUP}/member"
LABEL_AUDIT = f"{API_GROUP}/audit"  # the cluster an audit object belongs to
LABEL_BACKUP = f"{API_GROUP}/backup-of"  # the cluster a backup Job, its Pods or the backup volume belong to
LABEL_BACKUP_NAME = f"{API_GROUP}/backup"  # on a backup Job and its Pods: the OzoneSCMBackup it runs
LABEL_CLUSTER_ID = f"{API_GROUP}/cluster-id"  # on a member's volume: the Ozone cluster ID its data belongs to
MANAGER = "ozone-scm-operator"
APP = "ozone-scm"

# Annotations
ANN_REVISION = f"{API_GROUP}/revision"  # hash of the Pod template a member Pod was built from
ANN_INIT_MODE = f"{API_GROUP}/init-mode"  # init (primordial's first start) or bootstrap
ANN_CONTENT_HASH = f"{API_GROUP}/content-hash"  # hash of the desired body of a Service, ConfigMap, PDB, Secret
ANN_CERT_SERIAL = f"{API_GROUP}/certificate-serial"
# set on a member's certificate Secret once SCM recorded its revocation (the observed proof the step is done)
# CA mode scm: sha256 of the operator's public key (how it finds the certificate SCM signed for it)
ANN_PUBLIC_KEY = f"{API_GROUP}/public-key-sha256"
ANN_CERT_NOT_BEFORE = f"{API_GROUP}/certificate-not-before"  # CA mode scm: SCM chooses the operator's lifetime
ANN_CERT_REVOKED = f"{API_GROUP}/certificate-revoked"
ANN_CERT_NOT_AFTER = f"{API_GROUP}/certificate-not-after"
ANN_ROOT_FINGERPRINT = f"{API_GROUP}/root-ca-fingerprint"
# "true" on a TLS Secret whose certificate carries the role SANs (SCM role name, role URI); member certificates
# without it (issued by an operator before role-bound identities) are re-issued
ANN_ROLE_BOUND = f"{API_GROUP}/role-bound"

# on an OzoneSCMCluster: the member to recover a ring that lost its majority from (removed by the operator when done)
ANN_RECOVER_FROM = f"{API_GROUP}/recover-from"
# on an OzoneSCMBackup whose data is on the backup volume: removed once a clean-up Job deleted that data
FINALIZER_BACKUP_DATA = f"{API_GROUP}/backup-data"
# on an OzoneSCMBackup the schedule created: the scheduled time it stands for (retention counts only these)
ANN_SCHEDULED_AT = f"{API_GROUP}/scheduled-at"

# Paths and ports inside a member Pod
DATA_DIR = "/data"
METADATA_DIR = "/data/metadata"
CONF_DIR = "/etc/ozone"
TLS_DIR = "/var/run/ozone-scm/tls"
ENROLLMENT_DIR = "/var/run/ozone-scm/enrollment"
KEYTAB_DIR = "/var/run/ozone-scm/keytab"  # spec.security.kerberos.keytabSecret, read-only, mode 0400
KRB5_DIR = "/var/run/ozone-scm/krb5"  # spec.security.kerberos.krb5ConfigMap (key krb5.conf)
KRB5_CONF = "krb5.conf"
ENROLLMENT_DATANODE = "datanode.secret"
ENROLLMENT_SCM = "scm.secret"  # CA mode scm: bootstrapping members enrol their sub-CA with it
ADMIN_CSR_DIR = "/var/run/ozone-scm/admin-csr"  # CA mode scm: the operator's CSR, signed by the primordial at --init
ADMIN_CSR_FILE = "operator.csr"
BACKUP_DIR = "/backups"  # the backup volume inside a backup Job's Pod; one directory per OzoneSCMBackup
# spec.backup.s3: the Pod's own emptyDir a backup is written to before its upload (and a restore downloads into),
# and where the Secret spec.backup.s3.caSecret (key ca.crt) is mounted
SCRATCH_DIR = "/scratch"
OZONE_SCM_DIR = "/ozone-scm"  # spec.bootstrap.fromOzone: Ozone's SCM metadata volume, read-only, in the primordial's init
S3_CA_DIR = "/var/run/ozone-scm/s3-ca"
S3_CA_KEY = "ca.crt"
S3_CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")  # the keys of spec.backup.s3.credentialsSecret
AUDIT_DIR = "/audit"  # the audit Pod's scratch/ (emptyDir, the export in scratch/export) and reports/ (the report volume)
# Port names (at most 15 characters, as Kubernetes wants) -> numbers. Ozone's own port numbers serve Ozone's
# protocols over Hadoop RPC (what Ozone's OM, datanodes and `ozone admin` speak); our gRPC services (the operator,
# our client, CLI and datanode simulator) have ports of their own; Raft and inter-SCM are unchanged.
PORTS = {
    "client-hadoop": 9860,  # ozone.scm.client.port: StorageContainerLocationProtocol (admin)
    "datanode-hadoop": 9861,  # ozone.scm.datanode.port: StorageContainerDatanodeProtocol
    "block-hadoop": 9863,  # ozone.scm.block.client.port: ScmBlockLocationProtocol (OM)
    "security-hadoop": 9961,  # ozone.scm.security.service.port: SCMSecurityProtocol (certificate reads)
    "client-grpc": 19860,  # ozone.scm.client.grpc.port
    "datanode-grpc": 19861,  # ozone.scm.datanode.grpc.port
    "block-grpc": 19863,  # ozone.scm.block.client.grpc.port
    "security-grpc": 19961,  # ozone.scm.security.service.grpc.port (only with security)
    "http": 9876,  # ozone.scm.http-address
    "ratis": 9894,  # ozone.scm.ratis.port
    "inter-scm": 9895,  # ozone.scm.grpc.port: the inter-SCM service (roles, transfer, checkpoints)
}
# The gRPC client port operators before the port swap configured (Ozone's 9860 then served gRPC): a member still
# running such a configuration during the roll that swaps them answers there
LEGACY_GRPC_CLIENT_PORT = 9860
# ozone-site.xml key of each port (the http address is written as host:port)
PORT_KEYS = {
    "client-hadoop": "ozone.scm.client.port",
    "datanode-hadoop": "ozone.scm.datanode.port",
    "block-hadoop": "ozone.scm.block.client.port",
    "security-hadoop": "ozone.scm.security.service.port",
    "client-grpc": "ozone.scm.client.grpc.port",
    "datanode-grpc": "ozone.scm.datanode.grpc.port",
    "block-grpc": "ozone.scm.block.client.grpc.port",
    "security-grpc": "ozone.scm.security.service.grpc.port",
    "ratis": "ozone.scm.ratis.port",
    "inter-scm": "ozone.scm.grpc.port",
}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_CLUSTER_NAME = 45  # leaves room for "-<index>-data" within a 63-character DNS label


def member_name(cluster: str, index: int) -> str:
    return f"{cluster}-{index}"


def member_index(cluster: str, name: str) -> int | None:
    """The index of a member name of this cluster, or None if the name is not one."""
    prefix = f"{cluster}-"
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    return int(rest) if rest.isdigit() else None


def pvc_name(member: str) -> str:
    return f"{member}-data"


def headless_service_name(cluster: str) -> str:
    return f"{cluster}-headless"


def client_service_name(cluster: str) -> str:
    return cluster


def configmap_name(cluster: str) -> str:
    return f"{cluster}-config"


def pdb_name(cluster: str) -> str:
    return cluster


def root_ca_secret_name(cluster: str) -> str:
    return f"{cluster}-root-ca"


def member_tls_secret_name(member: str) -> str:
    return f"{member}-tls"


def operator_client_secret_name(cluster: str) -> str:
    return f"{cluster}-operator-client"


def admin_csr_secret_name(cluster: str) -> str:
    """CA mode scm: the operator's certificate signing request (public; its key stays in the client Secret)."""
    return f"{cluster}-admin-csr"


def audit_cronjob_name(cluster: str) -> str:
    """The CronJob of the scheduled Spark audit (its Jobs are ``<name>-<schedule time>``, 52 characters at most)."""
    return f"{cluster}-audit"


def audit_pvc_name(cluster: str) -> str:
    """The volume the audit reports (and the past runs they chart as trends) are kept on."""
    return f"{cluster}-audit-reports"


def audit_driver_service_name(cluster: str) -> str:
    """The headless Service through which a Spark audit's executor Pods reach its driver (the audit Pod)."""
    return f"{cluster}-audit-driver"


def audit_labels(cluster: str) -> dict[str, str]:
    """Labels of the audit's CronJob, Jobs, Pods and report volume. Deliberately without ``LABEL_CLUSTER`` and
    the member selector: the reconciler lists a cluster's Pods and PVCs by ``LABEL_CLUSTER`` as members' objects,
    and the Services and the PDB select member Pods; an audit Pod must be neither."""
    return {LABEL_NAME: APP, LABEL_INSTANCE: cluster, LABEL_COMPONENT: "audit", LABEL_MANAGED_BY: MANAGER,
            LABEL_AUDIT: cluster}


def backup_pvc_name(cluster: str) -> str:
    """The volume the cluster's backups are written to (``spec.backup.volume``), one directory per backup."""
    return f"{cluster}-backups"


def backup_path(backup: str) -> str:
    """Where one backup lives on the backup volume (as its Jobs mount it)."""
    return f"{BACKUP_DIR}/{backup}"


_MAX_JOB_NAME = 52  # a Job's Pods carry its name in a label (63 characters) and get a 5-character suffix


def _bounded(name: str) -> str:
    if len(name) <= _MAX_JOB_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:_MAX_JOB_NAME - 9].rstrip('-')}-{digest}"


def scratch_path(backup: str) -> str:
    """Where a backup to object storage is written, verified and uploaded from (or a restore downloads it to)."""
    return f"{SCRATCH_DIR}/{backup}"


def backup_job_name(backup: str) -> str:
    """The Job that takes (and verifies) the backup ``backup``; shortened with a digest when the name is long."""
    return _bounded(f"{backup}-backup")


def backup_delete_job_name(backup: str) -> str:
    """The Job that deletes the data of the backup ``backup`` from the backup volume."""
    return _bounded(f"{backup}-delete")


def scheduled_backup_name(cluster: str, scheduled_at: str) -> str:
    """An OzoneSCMBackup the schedule creates: ``<cluster>-<YYYYMMDDHHMM>`` of its scheduled time (UTC)."""
    return f"{cluster}-{scheduled_at}"


def backup_labels(cluster: str) -> dict[str, str]:
    """Labels of the backup volume, the backup Jobs and their Pods. Without ``LABEL_CLUSTER`` and the member
    selector, like the audit's: the reconciler lists Pods and PVCs by ``LABEL_CLUSTER`` as members' objects."""
    return {LABEL_NAME: APP, LABEL_INSTANCE: cluster, LABEL_COMPONENT: "backup", LABEL_MANAGED_BY: MANAGER,
            LABEL_BACKUP: cluster}


def enrollment_secret_name(cluster: str) -> str:
    """The datanode enrolment secret (``ozone.scm.security.enrollment.datanode.secret.file``) of a secure cluster."""
    return f"{cluster}-enrollment"


def service_id(cluster: str) -> str:
    """``ozone.scm.service.ids``: one HA service per cluster, named after it."""
    return cluster


def member_host(member: str, cluster: str, namespace: str, cluster_domain: str) -> str:
    """The member's stable DNS name through the headless Service (hostname + subdomain on the Pod)."""
    return f"{member}.{headless_service_name(cluster)}.{namespace}.svc.{cluster_domain}"


def selector_labels(cluster: str) -> dict[str, str]:
    """Labels that select the member Pods of one cluster (Services, PDB)."""
    return {LABEL_NAME: APP, LABEL_INSTANCE: cluster, LABEL_COMPONENT: "scm"}


def common_labels(cluster: str) -> dict[str, str]:
    return {**selector_labels(cluster), LABEL_MANAGED_BY: MANAGER, LABEL_CLUSTER: cluster}


def member_labels(cluster: str, member: str) -> dict[str, str]:
    return {**common_labels(cluster), LABEL_MEMBER: member}


SUB_CA_PREFIX = "scm-sub@"  # Ozone's subject prefix of an SCM sub-CA: CN=scm-sub@<the member's host name>
MAX_COMMON_NAME = 64  # X.509's upper bound on a common name (RFC 5280, ub-common-name)


def check_certificate_name(member: str, cluster: str, namespace: str, cluster_domain: str) -> str | None:
    """None if ``member``'s sub-CA certificate can be named (``CN=scm-sub@<its DNS name>`` within X.509's 64
    characters), else a one-line reason saying what to shorten."""
    cn = SUB_CA_PREFIX + member_host(member, cluster, namespace, cluster_domain)
    if len(cn) <= MAX_COMMON_NAME:
        return None
    over = len(cn) - MAX_COMMON_NAME
    return (
        f"member {member}'s sub-CA certificate would be named {cn} ({len(cn)} characters; X.509 allows "
        f"{MAX_COMMON_NAME}): with security enabled, shorten the namespace by {over} characters or metadata.name "
        f"by {(over + 1) // 2} (it appears twice)"
    )


def check_client_certificate_name(cluster: str) -> str | None:
    """None unless the cluster's client Service would bear the name of the operator's own client certificate
    (``CN=ozone-scm-operator``, no DNS name: a TLS client checking host names reads the CN as one). No certificate
    but an SCM's may carry a name of the ring (docs/security.md), and SCM refuses to sign one (CA mode scm)."""
    if client_service_name(cluster) != MANAGER:
        return None
    return (
        f"metadata.name {cluster!r}: with security enabled the cluster's client Service would be named {cluster}, "
        f"the name of the operator's own client certificate (CN={MANAGER}), which a client checking host names "
        "would take for an SCM; choose another name"
    )


def check_cluster_name(name: str) -> str | None:
    """None if ``name`` can name a cluster, else a one-line reason."""
    if not _DNS_LABEL.match(name):
        return f"metadata.name {name!r} must be a DNS label (lower-case letters, digits and '-')"
    if len(name) > MAX_CLUSTER_NAME:
        return (
            f"metadata.name {name!r} is {len(name)} characters; at most {MAX_CLUSTER_NAME} leave room for member "
            "names (<name>-<index>) and their volumes within Kubernetes' 63-character limit"
        )
    return None

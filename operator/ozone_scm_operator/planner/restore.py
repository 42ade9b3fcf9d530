"""Creating a ring from a backup (``spec.bootstrap.fromBackup``): where the primordial's ``scm --restore`` reads
the backup from, or why it cannot (yet); for a secure ring (CA mode operator) the root CA it must keep -- the one
the backup records, taken from ``spec.bootstrap.rootCASecret`` into this cluster's root CA Secret. Shared by the
security concern (the root CA) and the repairs (the primordial's Pod). Pure."""

from __future__ import annotations

from ozone_scm_operator import backups, builders, naming
from ozone_scm_operator.model import BackupObs
from ozone_scm_operator.planner.actions import Action, CreateRootCA
from ozone_scm_operator.planner.passes import _Pass


def _restore_source(p: _Pass) -> tuple[builders.RestoreSource | None, str | None]:
    """Where ``spec.bootstrap.fromBackup`` restores from, or why it cannot (yet)."""
    wanted = p.spec.bootstrap.from_backup
    if not wanted:
        return None, None
    if p.spec.security.scm_ca or (p.spec.security.enabled and not p.spec.security.operator_ca):
        return None, ("the operator restores a secure ring in CA mode operator only (CA mode scm needs the root "
                      "CA's private key, which the operator's backups do not hold): restore it by hand with "
                      "`ozone-scm scm --restore DIR` from a backup taken with --include-keys, or with --root-ca-cert "
                      "and --root-ca-key (docs/operations.md, \"Restoring a secure ring\")")
    path = p.spec.bootstrap.backup_path
    if path is not None:
        claim = naming.backup_pvc_name(p.ref.name)
        if ("PersistentVolumeClaim", claim) not in p.obs.children:
            return None, (f"spec.bootstrap.fromBackup is {path} on this cluster's backup volume {claim}, which does "
                          "not exist: create it (spec.backup.volume) and copy the backup there, or name an "
                          "OzoneSCMBackup")
        return builders.RestoreSource(claim, path), None
    b = p.obs.restore_backup
    if b is None:
        return None, (f"spec.bootstrap.fromBackup names OzoneSCMBackup {wanted}, which does not exist in namespace "
                      f"{p.ref.namespace} (kubectl get ozonescmbackups); nothing is created until it does")
    if b.phase != backups.Phase.COMPLETED or not b.cluster:
        return None, (f"OzoneSCMBackup {wanted} is {b.phase or 'not started'}, not Completed; the ring is created "
                      "from it once it is")
    cid = b.status.get("clusterID")
    cluster_id = cid if isinstance(cid, str) else None
    if p.spec.security.enabled:
        why = _restore_root_mismatch(p, b)
        if why is not None:
            return None, why
    location = backups.location_of(b)
    if location.startswith("s3://"):
        if p.spec.backup.s3 is None:
            return None, (f"OzoneSCMBackup {wanted} is in object storage ({location}): set spec.backup.s3 (endpoint, "
                          "credentialsSecret, and caSecret for a private CA) on this cluster so that its first member "
                          "can download it")
        return builders.RestoreSource("", location, cluster_id, s3=p.spec.backup.s3), None
    return builders.RestoreSource(naming.backup_pvc_name(b.cluster), naming.backup_path(b.name), cluster_id), None


def _backup_root(b: BackupObs) -> str | None:
    fp = b.status.get("rootCAFingerprint")
    return fp if isinstance(fp, str) and fp else None


def _restore_root_mismatch(p: _Pass, b: BackupObs) -> str | None:
    """Secure restore (CA mode operator): why this cluster's root CA is not the one backup ``b`` records, or None."""
    expected = _backup_root(b)
    if expected is None:
        return (f"OzoneSCMBackup {b.name} records no root CA (a backup of a ring without security, or taken by an "
                "operator that did not record it): a secure ring is restored only from a backup of a secure ring "
                "that names its root CA (status.rootCAFingerprint); take a new one, or restore by hand "
                "(docs/operations.md, \"Restoring a secure ring\")")
    root_name = naming.root_ca_secret_name(p.ref.name)
    root = p.obs.secrets.get(root_name)
    held = root.root_fingerprint if root is not None else None
    if held != expected:
        return (f"Secret {root_name} holds root CA {held or '(none)'} but OzoneSCMBackup {b.name} records root CA "
                f"{expected}: the restored ring must keep the old ring's root CA, or no certificate issued under it "
                f"stays valid. Delete Secret {root_name} and name the old cluster's root CA Secret in "
                f"spec.bootstrap.rootCASecret ({naming.root_ca_secret_name(b.cluster)} if it was kept); nothing "
                "was started")
    return None


def _restored_root_ca(p: _Pass, root_name: str) -> Action | None:
    """CA mode operator, restoring: take the old cluster's root CA (``spec.bootstrap.rootCASecret``) into this
    cluster's root CA Secret, once its certificate is the root the backup records; never a new root."""
    b = p.obs.restore_backup
    wanted = p.spec.bootstrap.from_backup
    expected = _backup_root(b) if b is not None else None
    if b is None or b.phase != backups.Phase.COMPLETED or expected is None:
        _, why = _restore_source(p)  # says what is missing about the backup
        if why is not None:
            p.note("RestoreSource", why)
        return None
    src = p.obs.restore_root_ca
    named = p.spec.bootstrap.root_ca_secret
    old_root = naming.root_ca_secret_name(b.cluster)
    why = None
    if src is None and named is None:
        why = (f"restoring the secure ring of OzoneSCMBackup {wanted} needs its root CA (fingerprint {expected}): "
               f"name the Secret that holds it in spec.bootstrap.rootCASecret (the old cluster's {old_root}, kept "
               "when the cluster was deleted)")
    elif src is None:
        why = (f"spec.bootstrap.rootCASecret names Secret {named}, which does not exist in namespace "
               f"{p.ref.namespace}; the restore needs the root CA of OzoneSCMBackup {wanted} (fingerprint "
               f"{expected}, the old cluster's {old_root})")
    elif src.problem is not None:
        why = f"Secret {src.name} cannot be the restored ring's root CA: {src.problem}"
    elif src.fingerprint != expected:
        why = (f"Secret {src.name} holds root CA {src.fingerprint}, not the root CA {expected} OzoneSCMBackup {wanted} "
               f"records: no certificate of the old ring would be valid under it. Name the old cluster's root CA "
               f"Secret ({old_root} if it was kept) in spec.bootstrap.rootCASecret")
    if why is not None:
        p.note("RestoreSource", why + "; no root CA was taken and no Pod started")
        return None
    assert src is not None
    return CreateRootCA(
        target=root_name,
        reason="TakingRootCA",
        message=f"taking the root CA of Secret {src.name} (fingerprint {expected}, the root OzoneSCMBackup {wanted} "
                f"records) into Secret {root_name}",
        duration=p.spec.security.root_ca_duration,
        copy_from=src.name,
        fingerprint=expected,
    )

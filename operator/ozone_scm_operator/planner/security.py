"""Certificates and security Secrets (concern 3): the enrolment Secret; CA mode ``operator``: the root CA, the
operator's client certificate, member sub-CA certificates missing, signed by another root, or due for renewal;
CA mode ``scm``: the operator's key, CSR, the certificate the primordial signed, its renewal. Pure."""

from __future__ import annotations

import dataclasses
import datetime

from ozone_scm_operator import naming
from ozone_scm_operator.model import (
    CREATING,
    JOINED,
    JOINING,
    SecurityStatus,
)
from ozone_scm_operator.planner.actions import (
    Action,
    CreateAdminCSR,
    CreateClientKey,
    CreateEnrollmentSecret,
    CreateRootCA,
    DeleteSecret,
    FetchClientCertificate,
    IssueClientCertificate,
    IssueMemberCertificate,
    RenewClientCertificate,
)
from ozone_scm_operator.planner.passes import _Pass
from ozone_scm_operator.planner.restore import _restored_root_ca


def _security(p: _Pass) -> Action | None:
    sec = p.spec.security
    if not sec.enabled:
        return None
    enrollment = naming.enrollment_secret_name(p.ref.name)
    if enrollment not in p.obs.secrets:
        return CreateEnrollmentSecret(
            target=enrollment,
            reason="CreatingSecret",
            message=f"creating the enrolment secret{'s' if sec.scm_ca else ''} in {enrollment}",
            scm=sec.scm_ca,
        )
    if sec.scm_ca:
        return _scm_ca_client(p)
    if not sec.operator_ca:
        return None
    root_name = naming.root_ca_secret_name(p.ref.name)
    root = p.obs.secrets.get(root_name)
    recorded = p.status.security
    if root is None:
        if recorded.root_ca_fingerprint is None and p.spec.bootstrap.from_backup and p.status.cluster_id is None:
            return _restored_root_ca(p, root_name)  # a secure restore keeps the old ring's root CA
        if recorded.root_ca_fingerprint is None:
            return CreateRootCA(
                target=root_name,
                reason="CreatingRootCA",
                message=f"creating the root CA in Secret {root_name}",
                duration=sec.root_ca_duration,
            )
        p.note(
            "RootCAMissing",
            f"the root CA Secret {root_name} was deleted; members keep serving with their current certificates, but "
            "no member can be added, replaced, rolled or renewed until it is restored from a backup "
            f"(its certificate had SHA-256 fingerprint {recorded.root_ca_fingerprint}); the operator never replaces "
            "a root CA by itself",
        )
        return None
    if recorded.root_ca_fingerprint is None:
        p.set_status(
            security=SecurityStatus(
                root_ca_secret=root_name,
                root_ca_expiry=root.certificate_not_after,
                root_ca_fingerprint=root.root_fingerprint,
                revoked_serials=recorded.revoked_serials,
            )
        )
    elif root.root_fingerprint != recorded.root_ca_fingerprint:
        p.note(
            "RootCAChanged",
            f"Secret {root_name} holds a different root CA (fingerprint {root.root_fingerprint}, expected "
            f"{recorded.root_ca_fingerprint}); the operator issues nothing from it. Restore the original root CA",
        )
        return None
    fp = p.status.security.root_ca_fingerprint
    client_name = naming.operator_client_secret_name(p.ref.name)
    client = p.obs.secrets.get(client_name)
    if client is None or client.root_fingerprint != fp or _due(client.certificate_not_after, p, root.certificate_not_after):
        return IssueClientCertificate(
            target=client_name,
            reason="IssuingCertificate",
            message=f"issuing the operator's client certificate into Secret {client_name}",
            duration=sec.certificate_duration,
        )
    for m in p.members(CREATING, JOINING, JOINED):
        name = naming.member_tls_secret_name(m.name)
        s = p.obs.secrets.get(name)
        why = None
        if s is None:
            why = "issuing" if m.certificate_serial is None else "re-issuing (its Secret was deleted)"
        elif s.root_fingerprint != fp:
            why = "re-issuing (signed by another root CA)"
        elif _due(s.certificate_not_after, p, root.certificate_not_after):
            why = "renewing (expires " + (s.certificate_not_after.isoformat() if s.certificate_not_after else "?") + ")"
        elif not s.role_bound:
            why = "re-issuing with its role names (issued before role-bound identities)"
        if why:
            return IssueMemberCertificate(
                target=name,
                reason="IssuingCertificate",
                message=f"{why} the sub-CA certificate of member {m.name} into Secret {name}",
                member=m.name,
                duration=sec.certificate_duration,
            )
    return None


def _scm_ca_client(p: _Pass) -> Action | None:
    """CA mode scm: the operator's admin certificate through Ozone's own flow. Before any Pod: its key (client
    Secret) and CSR (mounted by the members, ``ozone.scm.security.admin.csr.files``). Once the primordial is ready
    (it signed the CSR at ``--init`` and recorded the certificate on its first leadership): fetch it by public key
    over the security port, trusting the root only with the scm enrolment secret's proof. Before expiry: renew it
    (``RenewCertificate``, a new key, presented with the current certificate). Until it holds a certificate the
    operator cannot observe the SCMs (mutual TLS), so it waits on the primordial's Pod readiness."""
    client_name = naming.operator_client_secret_name(p.ref.name)
    client = p.obs.secrets.get(client_name)
    if client is None:
        return CreateClientKey(
            target=client_name,
            reason="CreatingClientKey",
            message=f"creating the operator's administrator key in Secret {client_name}",
        )
    csr_name = naming.admin_csr_secret_name(p.ref.name)
    csr = p.obs.secrets.get(csr_name)
    if csr is None:
        return CreateAdminCSR(
            target=csr_name,
            reason="CreatingAdminCSR",
            message=f"creating the operator's certificate request (CN {naming.MANAGER}) in Secret {csr_name}",
        )
    if client.certificate_not_after is None and csr.public_key and client.public_key and csr.public_key != client.public_key:
        # the client Secret was lost and its key made again: the old request can never be fetched for the new key
        after = (
            f"; the primordial already signed the old one at --init, so an administrator must sign this one "
            f"(`ozone-scm admin cert sign --csr` with {naming.ADMIN_CSR_FILE} from Secret {csr_name})"
            if p.status.cluster_id else ""
        )
        return DeleteSecret(
            target=csr_name,
            reason="ReplacingAdminCSR",
            message=f"Secret {csr_name} holds a request for another key than {client_name}'s: replacing it{after}",
        )
    if client.certificate_not_after is None:
        primordial = p.status.primordial_member
        pod = p.obs.pods.get(primordial) if primordial else None
        if not primordial or pod is None or not pod.ready or not pod.pod_ip:
            return None  # the members' Pods come first; the certificate exists once the primordial leads
        return FetchClientCertificate(
            target=client_name,
            reason="FetchingCertificate",
            message=f"fetching the operator's certificate, signed by {primordial} at --init, into Secret {client_name}",
            member=primordial,
        )
    if client.root_fingerprint and p.status.security.root_ca_fingerprint != client.root_fingerprint:
        p.set_status(security=dataclasses.replace(p.status.security, root_ca_fingerprint=client.root_fingerprint))
    # SCM chooses the lifetime (hdds.x509.default.duration): renew within renewBefore, but never in the first two
    # thirds of the certificate's life, or a lifetime shorter than renewBefore would renew on every pass
    window = p.spec.security.renew_before
    if client.certificate_not_before is not None:
        window = min(window, (client.certificate_not_after - client.certificate_not_before) / 3)
    if client.certificate_not_after - window <= p.now and p.obs.scms:
        return RenewClientCertificate(
            target=client_name,
            reason="RenewingCertificate",
            message=f"renewing the operator's certificate (expires {client.certificate_not_after.isoformat()}) in Secret "
            f"{client_name}",
        )
    return None


def _due(not_after: datetime.datetime | None, p: _Pass, root_not_after: datetime.datetime | None) -> bool:
    """Whether a certificate the operator issued is to be renewed: within ``renewBefore`` of its end, unless it
    already ends with the root CA. Every certificate is capped at the root's end (``certs._issue``), so once the
    root has less than ``renewBefore`` left a renewal could not last longer, and would itself be due at once: the
    operator would re-issue on every pass (a short ``rootCADuration`` reaches that within its first year)."""
    if not_after is None:
        return True
    if root_not_after is not None and not_after >= root_not_after:
        return False
    return not_after - p.spec.security.renew_before <= p.now

"""Certificates for CA mode ``operator``: the root CA, each member's sub-CA certificate, the operator's client
certificate, and the Secret bodies that carry them. For CA mode ``scm``: the operator's CSR and the Secrets that
carry its key, its CSR and (once SCM signed it) its certificate chain.

Pure: keys, serial numbers and ``now`` are passed in (the effects layer generates keys and serials; tests pass
fixed ones), nothing is read or written. Uses ``cryptography``.

The trust layout follows Ozone's SCM HA security (SCM-HA.md) in the SCM's CA mode ``operator`` (docs/security.md):
one root CA; every SCM, the primordial one included, holds a sub-CA certificate signed by it
(``BasicConstraints(ca=True, path_length=0)``; it signs datanode certificates), named the way the SCM names its own
(``CN=scm-sub@<host>, OU=<node id>``) with the member's DNS names as subject alternative names, so the same
certificate serves mutual TLS between SCMs. Here the operator keeps the root CA key in the Secret
``<cluster>-root-ca`` instead of the primordial SCM; the members only ever see the root certificate (the trust
anchor, ``hdds.x509.rootca.certificate.file``) and their own key pair, delivered in the Secret ``<member>-tls``
(``ca.crt``; ``tls.crt`` = sub-CA then root; ``tls.key``), which the SCMs reload when the mounted files change
(``hdds.x509.subca.reload.interval``). Serials are random and at least 2^63 (the range SCM leaves to externally
issued certificates). Keys are EC P-256 (``hdds.key.algo=EC``, ``SHA256withECDSA``, set in ozone-site.xml).
Renewal issues a new key pair and certificate from the same root before ``renewBefore``; a removed member's serial
is recorded as revoked in ``status.security.revokedSerials``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import itertools
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ozone_scm_operator import naming
from ozone_scm_operator.builders import TLS_CA, TLS_CERT, TLS_KEY, Body, ClusterRef

PrivateKey = ec.EllipticCurvePrivateKey
ROOT_CERT = "ca.crt"
ROOT_KEY = "ca.key"
SCM_SUB_CA_PREFIX = naming.SUB_CA_PREFIX  # Ozone's subject prefix of an SCM sub-CA
EXTERNAL_SERIAL_FLOOR = 1 << 63  # SCM's own serials are a sequence below this; external ones are random above
# The role SANs SCM's CA writes (scm_server.security.core.identity: SCM_ROLE_NAME, role_uri), spelled here because
# this pure layer imports nothing of scm_server; tests/unit/operator keeps the two equal.
SCM_ROLE_NAME = "scm.ozone-scm.invalid"
ROLE_URI_SCHEME = "ozone-scm"


def role_uri(role: str, owner: str, cluster_id: str = "") -> str:
    """``ozone-scm://<cluster>/<scm|client>/<owner>`` (the cluster may be empty: it does not exist yet)."""
    return f"{ROLE_URI_SCHEME}://{cluster_id}/{role}/{owner}"


def is_role_bound(cert: x509.Certificate) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return any(u.startswith(f"{ROLE_URI_SCHEME}://") for u in san.get_values_for_type(x509.UniformResourceIdentifier))


BACKDATE = datetime.timedelta(minutes=5)  # tolerate clock skew between the operator and the members


@dataclasses.dataclass(frozen=True)
class KeyPair:
    certificate: x509.Certificate
    key: PrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @property
    def serial_hex(self) -> str:
        return format(self.certificate.serial_number, "x")

    @property
    def not_after(self) -> datetime.datetime:
        return self.certificate.not_valid_after_utc

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.certificate)


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


def load_pair(cert_pem: bytes, key_pem: bytes) -> KeyPair:
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the root CA key must be an EC private key")
    if cert.public_key() != key.public_key():
        raise ValueError("the root CA certificate does not match its private key")
    return KeyPair(cert, key)


def _name(common_name: str, owner: str = "") -> x509.Name:
    """Ozone's subject layout: ``CN=<prefix>@<host>, OU=<owner id>`` (no ``O=``: the cluster ID does not exist yet
    when the primordial member's certificate is issued, and the SCM then skips the cluster check)."""
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if owner:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, owner))
    return x509.Name(attrs)


def _check_serial(serial: int) -> None:
    if serial < EXTERNAL_SERIAL_FLOOR:
        raise ValueError(f"serial {serial:#x} is below 2^63, the range SCM reserves for its own certificates")


def create_root_ca(
    key: PrivateKey, *, cluster: str, namespace: str, now: datetime.datetime, duration: datetime.timedelta, serial: int
) -> KeyPair:
    _check_serial(serial)
    subject = _name(f"ozone-scm-operator-root@{cluster}.{namespace}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + duration)
        .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def _issue(
    root: KeyPair,
    key: PrivateKey,
    *,
    common_name: str,
    owner: str,
    dns_names: Sequence[str],
    uris: Sequence[str] = (),
    ca: bool,
    now: datetime.datetime,
    duration: datetime.timedelta,
    serial: int,
) -> KeyPair:
    _check_serial(serial)
    not_after = min(now + duration, root.not_after)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, owner))
        .issuer_name(root.certificate.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=True, encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(root.key.public_key()), critical=False
        )
    )
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.UniformResourceIdentifier(u) for u in uris]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return KeyPair(builder.sign(root.key, hashes.SHA256()), key)


def issue_member_certificate(
    root: KeyPair,
    key: PrivateKey,
    *,
    ref: ClusterRef,
    member: str,
    now: datetime.datetime,
    duration: datetime.timedelta,
    serial: int,
) -> KeyPair:
    """The member's sub-CA certificate, valid for its DNS names (never beyond the root's expiry)."""
    headless = naming.headless_service_name(ref.name)
    names = [ref.host(member), f"{member}.{headless}.{ref.namespace}.svc", f"{member}.{headless}", member]
    # the role SANs every SCM certificate carries: the SCM role name clients verify, and the role URI naming the
    # member (OU = node id; the cluster ID does not exist yet when the primordial's certificate is issued)
    return _issue(
        root, key, common_name=f"{SCM_SUB_CA_PREFIX}{ref.host(member)}", owner=member,
        dns_names=[*names, SCM_ROLE_NAME], uris=[role_uri("scm", member)], ca=True,
        now=now, duration=duration, serial=serial,
    )


def issue_client_certificate(
    root: KeyPair, key: PrivateKey, *, ref: ClusterRef, now: datetime.datetime, duration: datetime.timedelta, serial: int
) -> KeyPair:
    """The operator's own admin client certificate (not a CA)."""
    return _issue(
        root, key, common_name=naming.MANAGER, owner="", dns_names=(),
        uris=[role_uri("client", naming.MANAGER)], ca=False, now=now, duration=duration,
        serial=serial,
    )


# ---- CA mode scm: the operator's admin identity comes from SCM ------------------------------------------------


def public_key_sha256(key: PrivateKey) -> str:
    """Hex sha256 of the DER SubjectPublicKeyInfo: how SCM finds the certificate it signed for a key."""
    return _spki_sha256(key.public_key())


def _spki_sha256(public_key: object) -> str:
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def client_csr(key: PrivateKey) -> x509.CertificateSigningRequest:
    """The operator's CSR (``CN=ozone-scm-operator``, a user name SCM signs as a client certificate)."""
    return (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_name(naming.MANAGER))
        .sign(key, hashes.SHA256())
    )


def client_key_secret(ref: ClusterRef, key: PrivateKey) -> Body:
    """CA mode scm, before the primordial exists: the operator's client Secret with its key only (no certificate
    yet); the certificate SCM signs is added later (:func:`client_tls_secret_from_scm`)."""
    meta = ref.metadata(naming.operator_client_secret_name(ref.name), naming.common_labels(ref.name))
    meta["annotations"] = {naming.ANN_PUBLIC_KEY: public_key_sha256(key)}
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "data": {TLS_KEY: _b64(pem)}}


def admin_csr_secret(ref: ClusterRef, csr: x509.CertificateSigningRequest) -> Body:
    """CA mode scm: the CSR the primordial signs at ``--init`` (``ozone.scm.security.admin.csr.files``), mounted into
    the member Pods. Public: the key it was made from never leaves the operator's client Secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            **ref.metadata(naming.admin_csr_secret_name(ref.name), naming.common_labels(ref.name)),
            "annotations": {naming.ANN_PUBLIC_KEY: _spki_sha256(csr.public_key())},
        },
        "type": "Opaque",
        "data": {naming.ADMIN_CSR_FILE: _b64(csr.public_bytes(serialization.Encoding.PEM))},
    }


def client_tls_secret_from_scm(
    ref: ClusterRef, key: PrivateKey, chain: Sequence[x509.Certificate], root: x509.Certificate
) -> Body:
    """CA mode scm: the operator's client Secret once SCM signed its certificate (``chain``: leaf first, then its
    issuers below the root). Raises if the certificate is not for ``key`` or does not chain to ``root``."""
    leaf = chain[0]
    if leaf.public_key() != key.public_key():
        raise ValueError("the certificate SCM returned is not for the operator's key")
    issued = [*chain, root]
    for child, parent in itertools.pairwise(issued):
        child.verify_directly_issued_by(parent)
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    body = tls_secret(ref, naming.operator_client_secret_name(ref.name), naming.common_labels(ref.name),
                      KeyPair(leaf, key), root)
    body["metadata"]["annotations"][naming.ANN_PUBLIC_KEY] = public_key_sha256(key)
    body["metadata"]["annotations"][naming.ANN_CERT_NOT_BEFORE] = leaf.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    body["type"] = "Opaque"  # the same Secret first held the key alone; a Secret's type cannot change
    body["data"][TLS_CERT] = _b64(pem + root.public_bytes(serialization.Encoding.PEM))
    return body


def verify_issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> None:
    """Raise if ``cert`` is not signed by ``issuer`` (signature and issuer name)."""
    cert.verify_directly_issued_by(issuer)


def needs_renewal(not_after: datetime.datetime | None, now: datetime.datetime, renew_before: datetime.timedelta) -> bool:
    return not_after is None or not_after - renew_before <= now


# ---------------------------------------------------------------------------------------------------------------
# Secret bodies
# ---------------------------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def root_ca_secret(ref: ClusterRef, root: KeyPair) -> Body:
    """The root CA Secret. It carries NO owner reference: deleting the cluster must not silently destroy the
    trust anchor of certificates that may still be in use; the operator never recreates it either (a lost root
    CA is reported, not replaced)."""
    meta = ref.metadata(naming.root_ca_secret_name(ref.name))
    del meta["ownerReferences"]
    meta["annotations"] = {
        naming.ANN_ROOT_FINGERPRINT: root.fingerprint,
        naming.ANN_CERT_NOT_AFTER: root.not_after.strftime("%Y-%m-%dT%H:%M:%SZ"),
        naming.ANN_CERT_SERIAL: root.serial_hex,
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {ROOT_CERT: _b64(root.cert_pem), ROOT_KEY: _b64(root.key_pem)},
    }


def tls_secret(ref: ClusterRef, name: str, labels: dict[str, str], pair: KeyPair, root: x509.Certificate) -> Body:
    meta = ref.metadata(name, labels)
    meta["annotations"] = {
        naming.ANN_CERT_SERIAL: pair.serial_hex,
        naming.ANN_CERT_NOT_AFTER: pair.not_after.strftime("%Y-%m-%dT%H:%M:%SZ"),
        naming.ANN_ROOT_FINGERPRINT: fingerprint(root),
    }
    if is_role_bound(pair.certificate):
        meta["annotations"][naming.ANN_ROLE_BOUND] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "kubernetes.io/tls",
        "data": {
            TLS_CA: _b64(root.public_bytes(serialization.Encoding.PEM)),
            # the chain: this certificate, then the root (what hdds.x509.subca.certificate.file expects)
            TLS_CERT: _b64(pair.cert_pem + root.public_bytes(serialization.Encoding.PEM)),
            TLS_KEY: _b64(pair.key_pem),
        },
    }


def member_tls_secret(ref: ClusterRef, member: str, pair: KeyPair, root: x509.Certificate) -> Body:
    return tls_secret(
        ref, naming.member_tls_secret_name(member), naming.member_labels(ref.name, member), pair, root
    )


def client_tls_secret(ref: ClusterRef, pair: KeyPair, root: x509.Certificate) -> Body:
    return tls_secret(ref, naming.operator_client_secret_name(ref.name), naming.common_labels(ref.name), pair, root)


def decode_secret_field(data: Mapping[str, str] | None, key: str) -> bytes | None:
    if not data or key not in data:
        return None
    return base64.b64decode(data[key])


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

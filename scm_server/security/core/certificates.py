"""X.509 builders: keys, the root CA, CSRs, issued certificates, CRLs, chain checks (pure).

Who calls it: ``scm --init`` (root CA + the primordial's sub-CA), the CA server on the leader
(sub-CA certificates for bootstrapping SCMs, datanode/OM/client certificates, CRLs), the
enrolling parties (CSRs) and tests. What it must not do: read the clock, touch files or the
network; ``now``, keys and serial numbers are arguments, results are ``cryptography`` objects.

Ozone's hierarchy is kept: the primordial SCM's self-signed **root CA** (serial 1) signs a
**sub-CA** certificate for every SCM (the primordial's own is serial 2); each SCM's sub-CA signs
the certificates of datanodes and OMs. Profiles:

* root CA: ``BasicConstraints(CA)``, ``keyCertSign + cRLSign``;
* sub-CA (``Profile.SUB_CA``): ``BasicConstraints(CA)`` without a path length, so that an SCM's
  sub-CA may be signed by another SCM's sub-CA when no SCM holds the root key (HDDS-8286); also
  ``digitalSignature`` and ``serverAuth + clientAuth``, because an SCM uses its sub-CA certificate
  for TLS, as Ozone does;
* end entity (``Profile.END_ENTITY``): not a CA, ``digitalSignature + keyEncipherment``,
  ``serverAuth + clientAuth``.

The subject and extensions of an issued certificate come from the signer's validated request
(:mod:`scm_server.security.core.requests`), never from extensions a CSR asks for. ``notBefore`` is
back-dated by :data:`NOT_BEFORE_SKEW` (clock differences between SCMs) and ``notAfter`` never
passes the issuer's.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import ipaddress
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey

NOT_BEFORE_SKEW = timedelta(minutes=5)
MAX_SERIAL = (1 << 159) - 1  # RFC 5280: at most 20 octets, positive
# SCM's own serials come from the replicated CertificateId sequence, far below this; certificates issued outside
# SCM (an operator's root, --init admin certificates) use random serials at or above it. The ranges are disjoint,
# so within one cluster a serial alone names one certificate, whichever CA issued it.
EXTERNAL_SERIAL_FLOOR = 1 << 63
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$")

HashType = hashes.SHA256 | hashes.SHA384 | hashes.SHA512
_HASHES: dict[str, type[hashes.SHA256] | type[hashes.SHA384] | type[hashes.SHA512]] = {
    "SHA256": hashes.SHA256,
    "SHA384": hashes.SHA384,
    "SHA512": hashes.SHA512,
}
_CURVES: dict[int, type[ec.EllipticCurve]] = {256: ec.SECP256R1, 384: ec.SECP384R1, 521: ec.SECP521R1}


class PKIError(ValueError):
    """Bad input to a builder or a failed check; the message says what is wrong."""


class Profile(enum.Enum):
    SUB_CA = "SUB_CA"
    END_ENTITY = "END_ENTITY"


@dataclasses.dataclass(frozen=True)
class KeySpec:
    """``hdds.key.algo`` / ``hdds.key.len`` / ``hdds.x509.signature.algorithm``."""

    algorithm: str = "RSA"
    length: int = 2048
    signature: str = "SHA256withRSA"

    def hash(self) -> HashType:
        name = self.signature.upper().split("WITH")[0]
        try:
            return _HASHES[name]()
        except KeyError:
            raise PKIError(f"unsupported signature algorithm {self.signature!r}; use e.g. SHA256withRSA") from None


def generate_key(spec: KeySpec) -> PrivateKey:
    """The default key generator (OS randomness). Builders never call it: callers inject keys."""
    algo = spec.algorithm.upper()
    if algo == "RSA":
        return rsa.generate_private_key(public_exponent=65537, key_size=spec.length)
    if algo == "EC":
        curve = _CURVES.get(spec.length)
        if curve is None:
            raise PKIError(f"EC key length {spec.length}: use 256, 384 or 521")
        return ec.generate_private_key(curve())
    raise PKIError(f"key algorithm {spec.algorithm!r}: use RSA or EC")


@dataclasses.dataclass(frozen=True)
class SubjectInfo:
    """What goes into a certificate's subject and SAN: ``CN=<name>, OU=<owner>, O=<cluster>``."""

    common_name: str
    owner_id: str = ""
    cluster_id: str = ""
    hostnames: tuple[str, ...] = ()
    # what only the CA adds (scm_server.security.core.identity.role_bound): reserved role DNS names, role URIs
    role_names: tuple[str, ...] = ()
    uris: tuple[str, ...] = ()

    def to_name(self) -> x509.Name:
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, self.common_name)]
        if self.owner_id:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, self.owner_id))
        if self.cluster_id:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, self.cluster_id))
        return x509.Name(attrs)

    def san(self) -> x509.SubjectAlternativeName | None:
        names: list[x509.GeneralName] = [general_name(h) for h in dict.fromkeys(self.hostnames)]
        names += [x509.DNSName(n) for n in dict.fromkeys(self.role_names)]
        names += [x509.UniformResourceIdentifier(u) for u in dict.fromkeys(self.uris)]
        return x509.SubjectAlternativeName(names) if names else None


def general_name(host: str) -> x509.GeneralName:
    """An IP literal becomes an IPAddress SAN, anything else a DNSName (validated)."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not _HOSTNAME_RE.match(host):
        raise PKIError(f"{host!r} is not a valid host name or IP address for a certificate")
    return x509.DNSName(host.rstrip("."))


def _check_serial(serial: int) -> None:
    if not 0 < serial <= MAX_SERIAL:
        raise PKIError(f"serial number {serial} out of range (1 .. 2^159-1)")


def _aware(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise PKIError("now must be timezone-aware (UTC)")
    return now.astimezone(UTC)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not ca,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


_TLS_EKU = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])


def build_root_ca(
    key: PrivateKey, subject: SubjectInfo, *, serial: int, now: datetime, lifetime: timedelta, spec: KeySpec
) -> x509.Certificate:
    """A self-signed root CA certificate (Ozone: serial 1, subject ``scm-root@<host>``)."""
    _check_serial(serial)
    now = _aware(now)
    name = subject.to_name()
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - NOT_BEFORE_SKEW)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    san = subject.san()
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return builder.sign(key, spec.hash())


def build_csr(
    key: PrivateKey, subject: SubjectInfo, spec: KeySpec, *, request_ca: bool = False
) -> x509.CertificateSigningRequest:
    """A PKCS#10 request for ``subject``. ``request_ca`` asks for CA rights (an SCM's sub-CA; a
    datanode asking for it is refused by the signer)."""
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject.to_name())
    # host names only: role SANs are the signer's to add (a CSR's extensions are never copied anyway)
    san = SubjectInfo(subject.common_name, hostnames=subject.hostnames).san()
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    if request_ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    return builder.sign(key, spec.hash())


def issue_certificate(
    subject: SubjectInfo,
    public_key: PublicKey,
    *,
    issuer: x509.Certificate,
    issuer_key: PrivateKey,
    serial: int,
    now: datetime,
    lifetime: timedelta,
    profile: Profile,
    spec: KeySpec,
) -> x509.Certificate:
    """Sign ``public_key`` for ``subject`` with ``issuer``'s key under ``profile``.

    ``notAfter`` = min(now + lifetime, issuer's notAfter): a certificate never outlives its CA.
    """
    _check_serial(serial)
    now = _aware(now)
    if not is_ca(issuer):
        raise PKIError(f"{issuer.subject.rfc4514_string()} is not a CA certificate and cannot sign")
    if not key_matches(issuer, issuer_key):
        raise PKIError("the issuer's private key does not match the issuer certificate")
    issuer_end = issuer.not_valid_after_utc
    if issuer_end <= now:
        raise PKIError(f"the issuing CA {issuer.subject.rfc4514_string()} expired at {issuer_end.isoformat()}")
    if now + NOT_BEFORE_SKEW < issuer.not_valid_before_utc:
        raise PKIError(
            f"the issuing CA {issuer.subject.rfc4514_string()} is not valid before "
            f"{issuer.not_valid_before_utc.isoformat()}; is this SCM's clock behind?"
        )
    not_after = min(now + lifetime, issuer_end)
    ca = profile is Profile.SUB_CA
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject.to_name())
        .issuer_name(issuer.subject)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(max(now - NOT_BEFORE_SKEW, issuer.not_valid_before_utc))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(_key_usage(ca=ca), critical=True)
        .add_extension(_TLS_EKU, critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    san = subject.san()
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return builder.sign(issuer_key, spec.hash())


@dataclasses.dataclass(frozen=True)
class RevokedEntry:
    serial: int
    revoked_at: datetime
    reason: int = 0  # RFC 5280 CRLReason code


# RFC 5280 CRLReason codes (7 is unused).
REASONS: dict[int, x509.ReasonFlags] = {
    0: x509.ReasonFlags.unspecified,
    1: x509.ReasonFlags.key_compromise,
    2: x509.ReasonFlags.ca_compromise,
    3: x509.ReasonFlags.affiliation_changed,
    4: x509.ReasonFlags.superseded,
    5: x509.ReasonFlags.cessation_of_operation,
    6: x509.ReasonFlags.certificate_hold,
    8: x509.ReasonFlags.remove_from_crl,
    9: x509.ReasonFlags.privilege_withdrawn,
    10: x509.ReasonFlags.aa_compromise,
}
REASON_NAMES = {
    "unspecified": 0,
    "keyCompromise": 1,
    "cACompromise": 2,
    "affiliationChanged": 3,
    "superseded": 4,
    "cessationOfOperation": 5,
    "certificateHold": 6,
    "privilegeWithdrawn": 9,
}


def reason_code(name: str) -> int:
    """``keyCompromise`` (or 1) -> 1; a clear error for anything else."""
    if name.isdigit() and int(name) in REASONS:
        return int(name)
    for known, code in REASON_NAMES.items():
        if known.lower() == name.lower():
            return code
    raise PKIError(f"unknown revocation reason {name!r}; use one of {', '.join(REASON_NAMES)}")


def reason_name(code: int) -> str:
    for name, value in REASON_NAMES.items():
        if value == code:
            return name
    return str(code)


def build_crl(
    issuer: x509.Certificate,
    issuer_key: PrivateKey,
    entries: Sequence[RevokedEntry],
    *,
    now: datetime,
    next_update: timedelta,
    number: int,
    spec: KeySpec,
) -> x509.CertificateRevocationList:
    """A CRL signed by ``issuer`` listing ``entries`` (those it issued; the caller filters)."""
    now = _aware(now)
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.subject)
        .last_update(now)
        .next_update(now + next_update)
        .add_extension(x509.CRLNumber(max(number, 0)), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    for e in sorted(entries, key=lambda e: e.serial):
        revoked = x509.RevokedCertificateBuilder().serial_number(e.serial).revocation_date(_aware(e.revoked_at))
        if e.reason:
            revoked = revoked.add_extension(x509.CRLReason(REASONS.get(e.reason, x509.ReasonFlags.unspecified)), critical=False)
        builder = builder.add_revoked_certificate(revoked.build())
    return builder.sign(issuer_key, spec.hash())


# ---------------------------------------------------------------------------------------------
# inspection and checks
# ---------------------------------------------------------------------------------------------


def is_ca(cert: x509.Certificate) -> bool:
    try:
        bc = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    return bool(bc.ca)


def is_self_signed(cert: x509.Certificate) -> bool:
    if cert.subject != cert.issuer:
        return False
    try:
        cert.verify_directly_issued_by(cert)
    except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm):
        return False
    return True


def _public_der(key: PublicKey | x509.Certificate) -> bytes:
    pub = key.public_key() if isinstance(key, x509.Certificate) else key
    return pub.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_matches(cert: x509.Certificate, key: PrivateKey) -> bool:
    return _public_der(cert) == _public_der(key.public_key())


def public_key_sha256(key: PublicKey | x509.Certificate) -> str:
    """Hex sha256 of the DER SubjectPublicKeyInfo (how a key finds the certificate signed for it)."""
    return hashlib.sha256(_public_der(key)).hexdigest()


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


def check_key_strength(key: PublicKey) -> None:
    """Refuse weak keys in requests: RSA < 2048 bits, curves other than P-256/384/521."""
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise PKIError(f"RSA key of {key.key_size} bits is too weak; use at least 2048 bits")
        return
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name not in ("secp256r1", "secp384r1", "secp521r1"):
            raise PKIError(f"EC curve {key.curve.name} is not accepted; use P-256, P-384 or P-521")
        return
    raise PKIError(f"unsupported public key type {type(key).__name__}; use RSA or EC")


def check_validity(cert: x509.Certificate, now: datetime, what: str = "certificate") -> None:
    now = _aware(now)
    if now < cert.not_valid_before_utc:
        raise PKIError(f"{what} {describe(cert)} is not valid before {cert.not_valid_before_utc.isoformat()}")
    if now >= cert.not_valid_after_utc:
        raise PKIError(f"{what} {describe(cert)} expired at {cert.not_valid_after_utc.isoformat()}")


def describe(cert: x509.Certificate) -> str:
    return f"{cert.subject.rfc4514_string()} (serial {cert.serial_number})"


def verify_ca_chain(
    chain: Sequence[x509.Certificate], roots: Sequence[x509.Certificate], now: datetime
) -> x509.Certificate:
    """Check that ``chain[0]`` (a CA certificate: a sub-CA) chains through ``chain[1:]`` to one of
    ``roots``: signatures, names, validity, every issuer a CA. Returns the root it chains to.

    A hand-written walk because webpki-style verifiers refuse a CA certificate as the leaf.
    """
    if not chain:
        raise PKIError("empty certificate chain")
    pool = list(chain[1:])
    current = chain[0]
    check_validity(current, now)
    for _ in range(len(chain) + 1):
        for root in roots:
            if current.issuer == root.subject and _signed_by(current, root):
                check_validity(root, now, "root CA certificate")
                if not is_ca(root):
                    raise PKIError(f"{describe(root)} is not a CA certificate")
                return root
        parent = next((c for c in pool if current.issuer == c.subject and _signed_by(current, c)), None)
        if parent is None:
            raise PKIError(
                f"{describe(current)} is not signed by the root CA or an intermediate in the chain "
                f"(issuer {current.issuer.rfc4514_string()}); is it from another cluster's CA?"
            )
        if not is_ca(parent):
            raise PKIError(f"{describe(parent)} is not a CA certificate but signed {describe(current)}")
        check_validity(parent, now, "intermediate certificate")
        pool.remove(parent)
        current = parent
    raise PKIError("certificate chain does not end at a trusted root CA")


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm):
        return False
    return True


def verify_end_entity(
    leaf: x509.Certificate, intermediates: Sequence[x509.Certificate], roots: Sequence[x509.Certificate], now: datetime
) -> list[x509.Certificate]:
    """Verify a client/end-entity certificate with ``cryptography``'s (webpki) verifier; returns the chain."""
    store = verification.Store(list(roots))
    verifier = verification.PolicyBuilder().store(store).time(_aware(now)).build_client_verifier()
    try:
        return list(verifier.verify(leaf, list(intermediates)).chain)
    except verification.VerificationError as exc:
        raise PKIError(f"{describe(leaf)} does not verify: {exc}") from exc


def needs_renewal(cert: x509.Certificate, now: datetime, grace: timedelta) -> bool:
    """Ozone's rule: renew once ``now`` is within ``hdds.x509.renew.grace.duration`` of expiry."""
    return _aware(now) >= cert.not_valid_after_utc - grace


# ---------------------------------------------------------------------------------------------
# PEM
# ---------------------------------------------------------------------------------------------


def cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def certs_pem(certs: Sequence[x509.Certificate]) -> str:
    return "".join(cert_pem(c) for c in certs)


def csr_pem(csr: x509.CertificateSigningRequest) -> str:
    return csr.public_bytes(serialization.Encoding.PEM).decode("ascii")


def crl_pem(crl: x509.CertificateRevocationList) -> str:
    return crl.public_bytes(serialization.Encoding.PEM).decode("ascii")


def private_key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def public_key_pem(key: PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _bytes(data: str | bytes) -> bytes:
    return data.encode("ascii", errors="replace") if isinstance(data, str) else data


def load_certificates(data: str | bytes, what: str = "certificate") -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(_bytes(data))
    except ValueError as exc:
        raise PKIError(f"{what}: not a PEM certificate ({exc})") from exc
    if not certs:
        raise PKIError(f"{what}: no PEM certificate found")
    return certs


def load_certificate(data: str | bytes, what: str = "certificate") -> x509.Certificate:
    return load_certificates(data, what)[0]


def load_private_key(data: str | bytes, what: str = "private key") -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(_bytes(data), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise PKIError(f"{what}: not an unencrypted PEM private key ({exc})") from exc
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise PKIError(f"{what}: {type(key).__name__} keys are not supported; use RSA or EC")
    return key


def load_csr(data: str | bytes) -> x509.CertificateSigningRequest:
    try:
        return x509.load_pem_x509_csr(_bytes(data))
    except ValueError as exc:
        raise PKIError(f"malformed CSR: {exc}") from exc


def load_crl(data: str | bytes) -> x509.CertificateRevocationList:
    try:
        return x509.load_pem_x509_crl(_bytes(data))
    except ValueError as exc:
        raise PKIError(f"malformed CRL: {exc}") from exc


def split_pem_certificates(data: str) -> list[str]:
    """Each ``-----BEGIN CERTIFICATE-----`` block of ``data`` as its own PEM string."""
    return [m.group(0) + "\n" for m in re.finditer(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", data, re.S)]

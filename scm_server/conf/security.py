"""Security configuration (Ozone's ``SecurityConfig``): keys, algorithms, lifetimes, files, secrets.

Parsed once at the edge (daemon, ``scm --init/--bootstrap``, CLI, datanode simulator) from an
:class:`~scm_server.conf.OzoneConfiguration` into the frozen :class:`SecurityConfig`; the security
package (:mod:`scm_server.security`) receives this object and never reads raw keys. Ozone's key
names and defaults are kept (``ozone.security.enabled``, ``hdds.grpc.tls.enabled``, ``hdds.key.*``,
``hdds.x509.*``, ``hdds.x509.rootca.*``, ``hdds.priv.key.file.name``, ``ozone.administrators``,
``ozone.http.policy``); the keys Ozone does not have are ours and say so in docs/security.md:

* ``hdds.x509.subca.certificate.file`` / ``hdds.x509.subca.private.key.file`` /
  ``hdds.x509.subca.reload.interval``: a sub-CA issued OUTSIDE SCM (CA mode ``operator``; HDDS-16035);
* ``hdds.x509.client.certificate.file`` / ``hdds.x509.client.private.key.file``: the client identity
  of the CLI, the operator and other tools under mutual TLS;
* ``ozone.scm.security.enrollment.<scm|datanode|om>.secret.file``: the enrolment secrets (Ozone
  authenticates enrolment with Kerberos, which we do not have);
* ``ozone.scm.security.admin.csr.files``: CSRs the primordial SCM signs at ``--init`` (admins'
  client certificates in CA mode ``scm``);
* ``hdds.x509.renew.check.interval``: how often the renewal check runs;
* ``hdds.x509.renew.overlap.duration``: how long a renewed end-entity certificate stays valid after
  its successor is issued;
* ``ozone.scm.security.enrollment.proof.window``, ``ozone.scm.security.enrollment.loopback.allowed``,
  ``ozone.scm.security.enrollment.rate.*`` and ``ozone.scm.security.service.max.message.size``: what
  the anonymous security port accepts and how much of it.

Nothing here reads a file: paths are only recorded, the edges open them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from scm_server.conf import ports
from scm_server.conf.groups import _build, _port, setting
from scm_server.exceptions import ConfigError

if TYPE_CHECKING:
    from scm_server.conf.source import ConfigSource

ENROLLMENT_ROLES = ("scm", "datanode", "om")
SECRET_KEY_ALGORITHMS = ("HmacSHA1", "HmacSHA224", "HmacSHA256", "HmacSHA384", "HmacSHA512")
_SIGNATURES = {
    "RSA": ("SHA256withRSA", "SHA384withRSA", "SHA512withRSA"),
    "EC": ("SHA256withECDSA", "SHA384withECDSA", "SHA512withECDSA"),
}


class CAMode(enum.Enum):
    """Where an SCM's CA material comes from (decided by which keys are set)."""

    SCM = "scm"  # the primordial SCM creates a self-signed root CA at --init (Ozone's default)
    EXTERNAL_ROOT = "external-root"  # hdds.x509.rootca.{certificate,private.key}.file: SCM holds a given root
    OPERATOR = "operator"  # hdds.x509.subca.*: a sub-CA issued outside SCM; no root key in the cluster


class HttpPolicy(enum.Enum):
    HTTP_ONLY = "HTTP_ONLY"
    HTTPS_ONLY = "HTTPS_ONLY"
    HTTP_AND_HTTPS = "HTTP_AND_HTTPS"


def _opt_path(value: str | None) -> Path | None:
    return Path(value) if value else None


@dataclasses.dataclass(frozen=True)
class SecurityConfig:
    security_enabled: bool = setting(
        "ozone.security.enabled", "bool",
        "Certificates: the SCMs run the CA and the security protocol, and members enrol for certificates.",
        "false",
    )
    grpc_tls_enabled: bool = setting(
        "hdds.grpc.tls.enabled", "bool",
        "Mutual TLS on every gRPC port with the certificates security issues (needs ozone.security.enabled).",
        "false",
    )
    key_algorithm: str = setting(
        "hdds.key.algo", "str", "Algorithm of the keys this process generates: RSA or EC.", "RSA"
    )
    key_length: int = setting(
        "hdds.key.len", "int", "Key size in bits: RSA at least 2048; EC 256, 384 or 521.", "2048"
    )
    signature_algorithm: str = setting(
        "hdds.x509.signature.algorithm", "str",
        "Signature of issued certificates; must fit hdds.key.algo (SHA256withRSA..., SHA256withECDSA...).",
        "SHA256withRSA",
    )
    default_duration: timedelta = setting(
        "hdds.x509.default.duration", "duration",
        "Lifetime of an issued end-entity certificate (duration; ISO-8601 P365D or 365d).",
        "P365D",
    )
    max_duration: timedelta = setting(
        "hdds.x509.max.duration", "duration",
        "The longest lifetime the CA issues (duration; the root CA's and sub-CAs' lifetime).",
        "P1865D",
    )
    renew_grace_duration: timedelta = setting(
        "hdds.x509.renew.grace.duration", "duration",
        "A certificate within this long of its expiry is renewed (duration; shorter than "
        "hdds.x509.default.duration).",
        "P28D",
    )
    renew_check_interval: timedelta = setting(
        "hdds.x509.renew.check.interval", "duration",
        "Ours: how often each SCM checks whether its certificate is due for renewal (duration).",
        "PT1H",
    )
    x509_dir_name: str = setting(
        "hdds.x509.dir.name", "str", "Name of the certificate directory under the component's metadata dir.",
        "certs",
    )
    x509_file_name: str = setting(
        "hdds.x509.file.name", "str", "File name of the component's own certificate.", "certificate.crt"
    )
    key_dir_name: str = setting(
        "hdds.key.dir.name", "str", "Name of the key directory under the component's metadata dir.", "keys"
    )
    private_key_file_name: str = setting(
        "hdds.priv.key.file.name", "str", "File name of the component's private key (PEM).", "private.pem"
    )
    public_key_file_name: str = setting(
        "hdds.public.key.file.name", "str", "File name of the component's public key (PEM).", "public.pem"
    )
    rootca_certificate_file: str | None = setting(
        "hdds.x509.rootca.certificate.file", "str",
        "PEM file of a root CA certificate given from outside (CA modes external-root and operator; clients' "
        "trust anchor).",
    )
    rootca_private_key_file: str | None = setting(
        "hdds.x509.rootca.private.key.file", "str",
        "PEM file of that root CA's private key: the primordial SCM signs sub-CAs with it (CA mode external-root).",
    )
    rootca_public_key_file: str | None = setting(
        "hdds.x509.rootca.public.key.file", "str", "PEM file of that root CA's public key (Ozone's key; optional).",
    )
    rootca_polling_interval: timedelta = setting(
        "hdds.x509.rootca.certificate.polling.interval", "duration",
        "How often clients and members poll the SCMs for a new root CA certificate (duration).",
        "PT2H",
    )
    subca_certificate_file: str | None = setting(
        "hdds.x509.subca.certificate.file", "str",
        "Ours: PEM file of a sub-CA certificate issued outside SCM (CA mode operator); needs "
        "hdds.x509.subca.private.key.file and hdds.x509.rootca.certificate.file.",
    )
    subca_private_key_file: str | None = setting(
        "hdds.x509.subca.private.key.file", "str", "Ours: PEM file of that sub-CA's private key (CA mode operator).",
    )
    subca_reload_interval: timedelta = setting(
        "hdds.x509.subca.reload.interval", "duration",
        "Ours: how often the SCM checks the sub-CA files for a change and reloads them (duration).",
        "PT30S",
    )
    client_certificate_file: str | None = setting(
        "hdds.x509.client.certificate.file", "str",
        "Ours: PEM file of the client certificate the CLI, the operator and tools present under mutual TLS.",
    )
    client_private_key_file: str | None = setting(
        "hdds.x509.client.private.key.file", "str", "Ours: PEM file of that client certificate's private key.",
    )
    administrators: tuple[str, ...] = setting(
        "ozone.administrators", "list",
        "Comma-separated users allowed the admin calls ('*' for all): client certificate CNs over gRPC, Kerberos short "
        "names over Hadoop RPC with hadoop.security.authentication=kerberos.",
        unset=(),
    )
    # the security protocol over gRPC (TLS); Ozone's ozone.scm.security.service.port serves it over Hadoop RPC
    security_service_port: int = _port(
        ports.SECURITY_GRPC,
        "Ours: port of the security protocol over gRPC (TLS): enrolment, CA certificates, CRLs; only with "
        "ozone.security.enabled.",
        kind="int",
    )
    admin_csr_files: tuple[str, ...] = setting(
        "ozone.scm.security.admin.csr.files", "list",
        "Ours: comma-separated CSR files the primordial SCM signs at scm --init (admins' client certificates, "
        "CA mode scm).",
        unset=(),
    )
    http_policy: str = setting(
        "ozone.http.policy", "str",
        "Where the web pages are served: HTTP_ONLY, HTTPS_ONLY or HTTP_AND_HTTPS (HTTPS needs "
        "ozone.security.enabled).",
        "HTTP_ONLY",
    )
    # ours: clients verify the SCM role name (scm.ozone-scm.invalid) instead of the dialled host. Off only while
    # upgrading a cluster whose certificates predate role-bound identities (docs/security.md)
    scm_role_check: bool = setting(
        "ozone.scm.security.role.check", "bool",
        "Ours: an SCM port's certificate must carry the SCM role name scm.ozone-scm.invalid (checked instead of "
        "the host name); false only while upgrading certificates issued before role names.",
        "true",
    )
    renew_overlap_duration: timedelta = setting(
        "hdds.x509.renew.overlap.duration", "duration",
        "Ours: how long a renewed end-entity certificate stays accepted after its successor is issued (duration; "
        "zero or more).",
        "PT30S",
    )
    enrollment_proof_window: timedelta = setting(
        "ozone.scm.security.enrollment.proof.window", "duration",
        "Ours: how old an enrolment proof may be before the security port refuses it (duration).",
        "PT5M",
    )
    enrollment_loopback_allowed: bool = setting(
        "ozone.scm.security.enrollment.loopback.allowed", "bool",
        "Ours: whether enrolment from a loopback address is accepted (a whole ring on one machine only).",
        "false",
    )
    enrollment_rate_per_source: float = setting(
        "ozone.scm.security.enrollment.rate.per.source", "float",
        "Ours: enrolment requests per second accepted from one source address.",
        "5.0",
    )
    enrollment_rate_per_source_burst: int = setting(
        "ozone.scm.security.enrollment.rate.per.source.burst", "int",
        "Ours: the burst of enrolment requests one source address may send at once (at least 1).",
        "20",
    )
    enrollment_rate_total: float = setting(
        "ozone.scm.security.enrollment.rate.total", "float",
        "Ours: enrolment requests per second accepted from all sources together.",
        "50.0",
    )
    enrollment_rate_total_burst: int = setting(
        "ozone.scm.security.enrollment.rate.total.burst", "int",
        "Ours: the burst of enrolment requests from all sources together (at least 1).",
        "100",
    )
    security_max_message_size: int = setting(
        "ozone.scm.security.service.max.message.size", "size",
        "Ours: the largest message the anonymous security port accepts (bytes; 4KB..64MB).",
        "64KB",
    )
    block_token_enabled: bool = setting(
        "hdds.block.token.enabled", "bool",
        "Block tokens: the OM signs them with SCM's secret keys and datanodes check them; with "
        "hdds.container.token.enabled it turns SCM's secret keys on.",
        "false",
    )
    container_token_enabled: bool = setting(
        "hdds.container.token.enabled", "bool",
        "Container tokens (GetContainerToken) signed with SCM's current secret key; with hdds.block.token.enabled "
        "it turns SCM's secret keys on.",
        "false",
    )
    block_token_expiry: timedelta = setting(
        "hdds.block.token.expiry.time", "duration",
        "Lifetime of a block or container token (duration).",
        "1d",
    )
    secret_key_algorithm: str = setting(
        "hdds.secret.key.algorithm", "str",
        "The HMAC of the token signing keys: HmacSHA256, HmacSHA1, HmacSHA224, HmacSHA384 or HmacSHA512.",
        "HmacSHA256",
    )
    secret_key_rotate_duration: timedelta = setting(
        "hdds.secret.key.rotate.duration", "duration",
        "How long a secret key stays the current (signing) key before the leader makes a new one (duration).",
        "1d",
    )
    secret_key_rotate_check_duration: timedelta = setting(
        "hdds.secret.key.rotate.check.duration", "duration",
        "How often the leader checks whether the current secret key is due for rotation (duration).",
        "10m",
    )
    secret_key_expiry_duration: timedelta = setting(
        "hdds.secret.key.expiry.duration", "duration",
        "How long a secret key verifies tokens after it was made; longer than hdds.secret.key.rotate.duration "
        "plus hdds.block.token.expiry.time (duration).",
        "9d",
    )
    datanode_kerberos_principal: str = setting(
        "hdds.datanode.kerberos.principal", "str",
        "The datanodes' service principal (_HOST is each datanode's host): a caller authenticated as <primary>/<host> "
        "gets a datanode certificate for <host> over Hadoop RPC.",
        "dn/_HOST@REALM",
    )
    om_kerberos_principal: str = setting(
        "ozone.om.kerberos.principal", "str",
        "The OM's service principal (_HOST is the OM's host): a caller authenticated as <primary>/<host> gets an OM "
        "certificate for <host> over Hadoop RPC.",
        "OM/_HOST@REALM",
    )
    enrollment_secret_files: tuple[tuple[str, str], ...] = ()

    @classmethod
    def if_enabled(cls, conf: ConfigSource) -> SecurityConfig | None:
        """The parsed and validated configuration when ``ozone.security.enabled`` is true, else None
        (and nothing else is read). A command (``scm --init``, ``scm --bootstrap``) calls this once
        and hands the result to every function that needs it."""
        if not conf.get_bool("ozone.security.enabled", False):
            return None
        return cls.from_conf(conf)

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> SecurityConfig:
        secrets = tuple(
            (role, value)
            for role in ENROLLMENT_ROLES
            if (value := conf.get_str(enrollment_secret_key(role)))
        )
        result = _build(cls, conf, enrollment_secret_files=secrets)
        result.validate()
        return result

    # ---- validation (one clear line per problem) ----
    def validate(self) -> None:
        if self.grpc_tls_enabled and not self.security_enabled:
            raise ConfigError(
                "hdds.grpc.tls.enabled=true needs ozone.security.enabled=true (TLS uses the certificates "
                "security issues); set ozone.security.enabled=true or hdds.grpc.tls.enabled=false"
            )
        algo = self.key_algorithm.upper()
        if algo not in _SIGNATURES:
            raise ConfigError(f"hdds.key.algo={self.key_algorithm}: use RSA or EC (e.g. hdds.key.algo=RSA)")
        if algo == "RSA" and self.key_length < 2048:
            raise ConfigError(f"hdds.key.len={self.key_length}: RSA keys must be at least 2048 bits (e.g. 2048)")
        if algo == "EC" and self.key_length not in (256, 384, 521):
            raise ConfigError(f"hdds.key.len={self.key_length}: EC keys are 256, 384 or 521 bits (e.g. 256)")
        if self.signature_algorithm not in _SIGNATURES[algo]:
            raise ConfigError(
                f"hdds.x509.signature.algorithm={self.signature_algorithm} does not fit hdds.key.algo={algo}; "
                f"use one of {', '.join(_SIGNATURES[algo])}"
            )
        for name in ("default_duration", "max_duration", "renew_grace_duration", "renew_check_interval",
                     "subca_reload_interval", "rootca_polling_interval", "enrollment_proof_window",
                     "block_token_expiry", "secret_key_rotate_duration", "secret_key_rotate_check_duration",
                     "secret_key_expiry_duration"):
            if getattr(self, name) <= timedelta(0):
                raise ConfigError(f"{_key(name)}: must be positive, got {getattr(self, name)}")
        if self.renew_overlap_duration < timedelta(0):
            raise ConfigError(
                f"hdds.x509.renew.overlap.duration: must be zero or positive, got {self.renew_overlap_duration}"
            )
        for name in ("enrollment_rate_per_source", "enrollment_rate_total"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{_key(name)}: requests per second must be positive, got {getattr(self, name)}")
        for name in ("enrollment_rate_per_source_burst", "enrollment_rate_total_burst"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{_key(name)}: must be at least 1, got {getattr(self, name)}")
        if not 4 << 10 <= self.security_max_message_size <= 64 << 20:
            raise ConfigError(
                f"ozone.scm.security.service.max.message.size={self.security_max_message_size}: use 4KB .. 64MB "
                "(enrolment requests are a few KB; e.g. 64KB)"
            )
        if self.default_duration > self.max_duration:
            raise ConfigError(
                f"hdds.x509.default.duration ({self.default_duration}) exceeds hdds.x509.max.duration "
                f"({self.max_duration}); shorten the first or raise the second"
            )
        if self.renew_grace_duration >= self.default_duration:
            raise ConfigError(
                f"hdds.x509.renew.grace.duration ({self.renew_grace_duration}) must be shorter than "
                f"hdds.x509.default.duration ({self.default_duration}), or every certificate renews at once"
            )
        for name in ("datanode_kerberos_principal", "om_kerberos_principal"):
            body = getattr(self, name).partition("@")[0]
            if not body or body.count("/") > 1 or body.startswith("/"):
                raise ConfigError(f"{_key(name)}={getattr(self, name)}: not a service principal; use "
                                  "<primary>/_HOST@<REALM> (e.g. dn/_HOST@EXAMPLE.COM)")
        if self.secret_key_algorithm not in SECRET_KEY_ALGORITHMS:
            raise ConfigError(
                f"hdds.secret.key.algorithm={self.secret_key_algorithm}: use one of {', '.join(SECRET_KEY_ALGORITHMS)} "
                "(e.g. HmacSHA256)"
            )
        if self.secret_keys_enabled and (
            self.secret_key_expiry_duration <= self.secret_key_rotate_duration + self.block_token_expiry
        ):
            raise ConfigError(
                f"hdds.secret.key.expiry.duration ({self.secret_key_expiry_duration}) must be longer than "
                f"hdds.secret.key.rotate.duration ({self.secret_key_rotate_duration}) plus hdds.block.token.expiry.time "
                f"({self.block_token_expiry}), or a token signed just before a rotation outlives its key; raise it "
                "(e.g. 9d)"
            )
        if bool(self.subca_certificate_file) != bool(self.subca_private_key_file):
            raise ConfigError(
                "hdds.x509.subca.certificate.file and hdds.x509.subca.private.key.file go together "
                "(an externally issued sub-CA certificate and its private key); set both or neither"
            )
        if self.subca_certificate_file and self.rootca_private_key_file:
            raise ConfigError(
                "hdds.x509.subca.* (CA mode operator: the root key stays outside the cluster) cannot be combined "
                "with hdds.x509.rootca.private.key.file; unset one of them"
            )
        if self.subca_certificate_file and not self.rootca_certificate_file:
            raise ConfigError(
                "hdds.x509.subca.certificate.file is set but hdds.x509.rootca.certificate.file (the root CA "
                "certificate it chains to, the trust anchor) is not; set it"
            )
        if self.rootca_private_key_file and not self.rootca_certificate_file:
            raise ConfigError(
                "hdds.x509.rootca.private.key.file is set without hdds.x509.rootca.certificate.file; set both"
            )
        if bool(self.client_certificate_file) != bool(self.client_private_key_file):
            raise ConfigError(
                "hdds.x509.client.certificate.file and hdds.x509.client.private.key.file go together; set both"
            )
        try:
            HttpPolicy(self.http_policy.upper())
        except ValueError:
            raise ConfigError(
                f"ozone.http.policy={self.http_policy}: use HTTP_ONLY, HTTPS_ONLY or HTTP_AND_HTTPS"
            ) from None
        if self.http_policy.upper() != "HTTP_ONLY" and not self.security_enabled:
            raise ConfigError(
                f"ozone.http.policy={self.http_policy} needs ozone.security.enabled=true (HTTPS uses the SCM's "
                "certificate); enable security or set ozone.http.policy=HTTP_ONLY"
            )

    # ---- derived ----
    @property
    def secret_keys_enabled(self) -> bool:
        """SCM makes, rotates and serves token signing keys (Ozone: security with block or container tokens)."""
        return self.security_enabled and (self.block_token_enabled or self.container_token_enabled)

    @property
    def tls(self) -> bool:
        """mutual TLS on every gRPC port (the security port is TLS whenever security is on)."""
        return self.security_enabled and self.grpc_tls_enabled

    @property
    def ca_mode(self) -> CAMode:
        if self.subca_certificate_file:
            return CAMode.OPERATOR
        if self.rootca_private_key_file:
            return CAMode.EXTERNAL_ROOT
        return CAMode.SCM

    @property
    def https(self) -> HttpPolicy:
        return HttpPolicy(self.http_policy.upper())

    def enrollment_secret_file(self, role: str) -> Path | None:
        return next((Path(v) for r, v in self.enrollment_secret_files if r == role), None)

    @property
    def rootca_certificate_path(self) -> Path | None:
        return _opt_path(self.rootca_certificate_file)

    @property
    def client_identity_configured(self) -> bool:
        return bool(self.client_certificate_file and self.client_private_key_file)

    def is_administrator(self, user: str) -> bool:
        return "*" in self.administrators or user in self.administrators


def enrollment_secret_key(role: str) -> str:
    return f"ozone.scm.security.enrollment.{role}.secret.file"


def _key(field_name: str) -> str:
    for f in dataclasses.fields(SecurityConfig):
        if f.name == field_name:
            return str(f.metadata.get("key", field_name))
    return field_name


SECURITY_ENABLED_KEY = "ozone.security.enabled"
AUTHENTICATION_KEY = "hadoop.security.authentication"
SCM_PRINCIPAL_KEY = "hdds.scm.kerberos.principal"
SCM_KEYTAB_KEY = "hdds.scm.kerberos.keytab.file"


def secure_hadoop_rpc_problem(settings: Mapping[str, str]) -> str | None:
    """Why Ozone's protocols cannot be served over Hadoop RPC on a secure cluster with these settings, in one line
    naming the keys to set (None when they can). On a secure cluster (``ozone.security.enabled``) every Hadoop RPC
    caller must be authenticated, which takes Kerberos: ``hadoop.security.authentication=kerberos`` and the SCM's
    principal and keytab. Only presence is checked here; the daemon checks the keytab and principal at start."""
    if str(settings.get(SECURITY_ENABLED_KEY, "false")).strip().lower() != "true":
        return None
    missing = []
    if str(settings.get(AUTHENTICATION_KEY, "simple")).strip().lower() != "kerberos":
        missing.append(f"{AUTHENTICATION_KEY}=kerberos")
    if not str(settings.get(SCM_PRINCIPAL_KEY, "")).strip():
        missing.append(f"{SCM_PRINCIPAL_KEY} (e.g. scm/_HOST@EXAMPLE.COM)")
    if not str(settings.get(SCM_KEYTAB_KEY, "")).strip():
        missing.append(f"{SCM_KEYTAB_KEY} (the keytab holding that principal's key)")
    if not missing:
        return None
    return (
        "Hadoop RPC on a secure cluster (ozone.security.enabled=true) serves Kerberos-authenticated callers only: "
        f"set {', '.join(missing)}, or leave Hadoop RPC off"
    )

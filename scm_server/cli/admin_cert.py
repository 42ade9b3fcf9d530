"""``ozone-scm admin cert list|info|revoke|crl|sign`` and ``ozone-scm cert request|fetch|fetch-ca``.

Registered by ``cli/main.py``. ``admin cert`` talks to the SCMs' certificate admin service on the
client port with the caller's client certificate (``hdds.x509.client.*``; revoke and sign need an
administrator, ``ozone.administrators``) and, for ``crl``, to every SCM's security port. Ozone has
``ozone admin cert list|info|clean``; revocation and CRLs are ours (Ozone removed them in
HDDS-10889). ``ozone-scm cert`` holds the local steps of getting an identity without copying keys
out of an SCM: make a key and CSR, fetch the certificate the primordial signed for it, fetch the
root CA certificate (proven by the enrolment secret when no root file is configured).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.table import Table

from scm_server.cli.context import CliContext, pass_ctx
from scm_server.cli.output import console, print_json, to_dict
from scm_server.client.security_admin import NODE_TYPES, SCMSecurityClient
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError
from scm_server.proto import scm_security_pb2
from scm_server.security.cert_client import SecurityProtocolClient
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.core import serials as serial_ids
from scm_server.security.keystore import atomic_write, load_certificate_file, read_secret
from scm_server.server import endpoints

T = TypeVar("T")


def _serials(typed: tuple[str, ...], hint: str = "SERIAL") -> list[str]:
    """Typed serials in their canonical form (decimal or 0x hex in; decimal out), or a one-line error."""
    try:
        return list(dict.fromkeys(serial_ids.canonical_serial(t) for t in typed))
    except serial_ids.SerialError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


def _run(ctx: CliContext, fn: Callable[[SCMSecurityClient], Awaitable[T]]) -> T:
    async def go() -> T:
        async with SCMSecurityClient(ctx.scm_addresses(), ctx.client_config(), security=ctx.client_security()) as c:
            return await fn(c)

    return asyncio.run(go())


def _ms(value: int) -> str:
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def _status(info: scm_security_pb2.CertificateInfoProto, now_ms: int) -> str:
    if info.HasField("revocation"):
        return f"REVOKED ({pki.reason_name(info.revocation.reason)})"
    if info.notAfterMs and info.notAfterMs <= now_ms:
        return "EXPIRED"
    return "VALID"


def info_dict(info: scm_security_pb2.CertificateInfoProto, now_ms: int) -> dict[str, Any]:
    c = info.certificate
    out: dict[str, Any] = {
        "serialId": c.serialId,
        "type": c.nodeType,
        "subject": info.subject,
        "issuer": info.issuer,
        "issuerSerialId": c.issuerSerialId,
        "ownerId": c.ownerId,
        "nodeId": c.nodeId,
        "notBefore": _ms(info.notBeforeMs),
        "notAfter": _ms(info.notAfterMs),
        "isCA": info.isCA,
        "table": "validSCMCerts" if info.scmCertificate else "validCerts",
        "status": _status(info, now_ms),
    }
    if c.x509Certificate:
        try:
            out["sha256"] = pki.fingerprint(pki.load_certificate(c.x509Certificate))
        except pki.PKIError:
            out["sha256"] = "unreadable"
    if info.HasField("revocation"):
        out["revocation"] = to_dict(info.revocation)
    return out


@click.group("cert")
def cert() -> None:
    """Certificates: list, info, revoke, CRL export, sign client certificates."""


@cert.command("list")
@click.option("--type", "role", type=click.Choice(sorted(NODE_TYPES)), default=None, help="Only this kind.")
@click.option("--revoked", is_flag=True, help="Only revoked certificates (and revoked external serials).")
@click.option("--start", default="", help="Smallest serial id to list (decimal, or hex with 0x).")
@click.option("--count", default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def list_cmd(ctx: CliContext, role: str | None, revoked: bool, start: str, count: int, as_json: bool) -> None:
    """What the SCMs issued or recorded (validSCMCerts, validCerts) and what is revoked."""
    first = _serials((start,), "--start")[0] if start else ""
    resp = _run(ctx, lambda c: c.list_certificates(role, revoked, first, count))
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    rows = [info_dict(i, now_ms) for i in resp.certificates]
    external = [to_dict(r) for r in resp.externalRevocations]
    if as_json:
        print_json({"certificates": rows, "externalRevocations": external})
        return
    table = Table(title=f"{len(rows)} certificate(s)")
    for col in ("serial", "type", "subject", "owner", "not after", "status"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["serialId"], r["type"], r["subject"], r["ownerId"] or "-", r["notAfter"], r["status"])
    console.print(table)
    for r in external:
        console.print(f"revoked external serial {r.get('serialId')} ({pki.reason_name(int(r.get('reason', 0)))})",
                      highlight=False)


@cert.command("info")
@click.argument("serial")
@click.option("--json", "as_json", is_flag=True)
@click.option("--pem", is_flag=True, help="Print the certificate in PEM.")
@pass_ctx
def info_cmd(ctx: CliContext, serial: str, as_json: bool, pem: bool) -> None:
    """One certificate by serial id (decimal, or hex with 0x)."""
    canonical = _serials((serial,))[0]
    info = _run(ctx, lambda c: c.certificate_info(canonical))
    if pem:
        click.echo(info.certificate.x509Certificate, nl=False)
        return
    data = info_dict(info, int(datetime.now(UTC).timestamp() * 1000))
    if as_json:
        print_json(data)
        return
    for key, value in data.items():
        console.print(f"{key}: {value}", highlight=False, soft_wrap=True)


@cert.command("revoke")
@click.argument("serials", nargs=-1, required=True)
@click.option("--reason", default="unspecified", show_default=True,
              help="RFC 5280 reason: " + ", ".join(pki.REASON_NAMES) + " (or its code).")
@click.option("--external", is_flag=True, help="Allow serials SCM never issued (e.g. operator-issued admin certificates).")
@pass_ctx
def revoke_cmd(ctx: CliContext, serials: tuple[str, ...], reason: str, external: bool) -> None:
    """Revoke certificates: every SCM refuses them from the next call on (administrators only).

    SERIALS in decimal (1234) or hex with 0x (0x4d2), as openssl prints them."""
    try:
        code = pki.reason_code(reason)
    except pki.PKIError as exc:
        raise click.BadParameter(str(exc), param_hint="--reason") from exc
    canonical = _serials(serials)
    resp = _run(ctx, lambda c: c.revoke(canonical, code, external))
    for r in resp.revoked:
        click.echo(f"Revoked certificate {r.serialId} ({pki.reason_name(r.reason)}) at {_ms(r.revocationTimeMs)}")


def _security_client(ctx: CliContext, ca_cert: Path | None = None, role: str = "datanode",
                     secret: bytes | None = None) -> SecurityProtocolClient:
    config = SecurityConfig.from_conf(ctx.conf)
    roots = []
    if ca_cert is not None:
        roots = load_certificate_file(ca_cert, "--ca-cert")
    elif config.rootca_certificate_file:
        roots = load_certificate_file(config.rootca_certificate_file, "hdds.x509.rootca.certificate.file")
    addresses = endpoints.protocol_addresses(ctx.conf.get_str, endpoints.Protocol.SECURITY)
    return SecurityProtocolClient(addresses, roots=roots, role=role, secret=secret, rounds=3)


@cert.command("crl")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None, help="Write the PEM CRLs here (default stdout).")
@pass_ctx
def crl_cmd(ctx: CliContext, out: Path | None) -> None:
    """Export the CRLs (one per CA key: every SCM's sub-CA, the root where an SCM holds it), in PEM."""
    client = _security_client(ctx)

    async def go() -> list[str]:
        crls: dict[str, str] = {}
        errors = []
        for address in client.addresses:
            try:
                resp = await client.crls_from(address)
            except Exception as exc:
                errors.append(f"{address}: {exc}")
                continue
            for pem in resp.crls:
                crl = pki.load_crl(pem)
                crls.setdefault(crl.issuer.rfc4514_string(), pem)
        if not crls:
            raise click.ClickException(f"no SCM answered with a CRL: {'; '.join(errors)}")
        for e in errors:
            click.echo(f"warning: {e}", err=True)
        return list(crls.values())

    pems = asyncio.run(go())
    text = "".join(pems)
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)
        click.echo(f"Wrote {len(pems)} CRL(s) to {out}")


@cert.command("sign")
@click.option("--csr", "csr_file", required=True, type=click.Path(path_type=Path, exists=True), help="PEM CSR (CN = user).")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Where to write the certificate chain.")
@pass_ctx
def sign_cmd(ctx: CliContext, csr_file: Path, out: Path) -> None:
    """Sign a client certificate for the user named in the CSR (administrators only)."""
    resp = _run(ctx, lambda c: c.sign(csr_file.read_text()))
    atomic_write(out, resp.x509Certificate.encode("ascii"))
    click.echo(f"Signed certificate {resp.serialId} written to {out}")


@cert.command("renew")
@pass_ctx
def renew_cmd(ctx: CliContext) -> None:
    """Renew this client's own certificate (hdds.x509.client.*): new key, same name; files replaced."""
    config = SecurityConfig.from_conf(ctx.conf)
    if not config.client_identity_configured:
        raise click.UsageError("no client certificate configured (hdds.x509.client.certificate.file / .private.key.file)")
    assert config.client_certificate_file and config.client_private_key_file
    cert_file, key_file = Path(config.client_certificate_file), Path(config.client_private_key_file)
    current = load_certificate_file(cert_file, "hdds.x509.client.certificate.file")[0]
    spec = pki.KeySpec(config.key_algorithm.upper(), config.key_length, config.signature_algorithm)
    key = pki.generate_key(spec)
    csr = pki.build_csr(key, pki.SubjectInfo(ids.identity_of(current).common_name), spec)
    resp = _run(ctx, lambda c: c.renew(pki.csr_pem(csr)))
    chain = pki.load_certificates(resp.x509Certificate)
    if not pki.key_matches(chain[0], key):
        raise click.ClickException("the SCM returned a certificate for another key; nothing was changed")
    # key first, then the certificate: clients re-read both once the certificate changes
    atomic_write(key_file.with_name(key_file.name + ".new"), pki.private_key_pem(key), 0o600)
    atomic_write(cert_file.with_name(cert_file.name + ".new"), pki.certs_pem(chain).encode("ascii"))
    key_file.with_name(key_file.name + ".new").replace(key_file)
    cert_file.with_name(cert_file.name + ".new").replace(cert_file)
    click.echo(f"Renewed: certificate {resp.serialId} valid until {chain[0].not_valid_after_utc.isoformat()}")


# ------------------------------------------------------------------------------- ozone-scm cert


@click.group("cert")
def cert_tools() -> None:
    """Local certificate steps: make a key + CSR, fetch a signed certificate or the root CA."""


@cert_tools.command("request")
@click.option("--user", required=True, help="User name for the client certificate (CN).")
@click.option("--key", "key_file", required=True, type=click.Path(path_type=Path), help="Private key to write (0600).")
@click.option("--csr", "csr_file", required=True, type=click.Path(path_type=Path), help="CSR to write.")
@pass_ctx
def request_cmd(ctx: CliContext, user: str, key_file: Path, csr_file: Path) -> None:
    """Make a key pair and a CSR (hdds.key.* / hdds.x509.signature.algorithm from the configuration)."""
    config = SecurityConfig.from_conf(ctx.conf)
    spec = pki.KeySpec(config.key_algorithm.upper(), config.key_length, config.signature_algorithm)
    if key_file.exists():
        raise click.ClickException(f"{key_file} exists; refusing to overwrite a private key")
    try:
        subject = ids.client_subject(user)
    except pki.PKIError as exc:
        raise click.BadParameter(str(exc), param_hint="--user") from exc
    key = pki.generate_key(spec)
    atomic_write(key_file, pki.private_key_pem(key), 0o600)
    atomic_write(csr_file, pki.csr_pem(pki.build_csr(key, subject, spec)).encode("ascii"))
    click.echo(f"Wrote {key_file} and {csr_file} (public key sha256 {pki.public_key_sha256(key.public_key())})")


@cert_tools.command("fetch")
@click.option("--key", "key_file", required=True, type=click.Path(path_type=Path, exists=True), help="Your private key.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Where to write the certificate chain.")
@click.option("--ca-cert", type=click.Path(path_type=Path, exists=True), default=None,
              help="Root CA certificate to trust (default hdds.x509.rootca.certificate.file).")
@pass_ctx
def fetch_cmd(ctx: CliContext, key_file: Path, out: Path, ca_cert: Path | None) -> None:
    """Fetch the certificate SCM signed for your key (e.g. at --init from ozone.scm.security.admin.csr.files)."""
    key = pki.load_private_key(key_file.read_bytes(), str(key_file))
    client = _security_client(ctx, ca_cert)
    if not client.roots:
        raise ConfigError("no root CA certificate to trust: pass --ca-cert or set hdds.x509.rootca.certificate.file "
                          "(`ozone-scm cert fetch-ca` gets it, proven by an enrolment secret)")
    resp = asyncio.run(client.certificate_for_key(pki.public_key_sha256(key.public_key())))
    atomic_write(out, (resp.certificate.x509Certificate + resp.chain).encode("ascii"))
    click.echo(f"Wrote certificate {resp.certificate.serialId} to {out}")


@cert_tools.command("fetch-ca")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Where to write the root CA certificate.")
@click.option("--role", type=click.Choice(["scm", "datanode", "om"]), default="datanode", show_default=True,
              help="Whose enrolment secret proves the root.")
@click.option("--secret-file", type=click.Path(path_type=Path, exists=True), default=None,
              help="The enrolment secret (default ozone.scm.security.enrollment.<role>.secret.file).")
@pass_ctx
def fetch_ca_cmd(ctx: CliContext, out: Path, role: str, secret_file: Path | None) -> None:
    """Get the root CA certificate from an SCM that proves it knows the enrolment secret."""
    config = SecurityConfig.from_conf(ctx.conf)
    path = secret_file or config.enrollment_secret_file(role)
    if path is None:
        raise click.UsageError(f"give --secret-file or set ozone.scm.security.enrollment.{role}.secret.file")
    secret = read_secret(path, "--secret-file")
    addresses = endpoints.protocol_addresses(ctx.conf.get_str, endpoints.Protocol.SECURITY)
    client = SecurityProtocolClient(addresses, role=role, secret=secret, rounds=3)
    trusted = asyncio.run(client.establish_trust())
    root = trusted.roots[0]
    atomic_write(out, pki.cert_pem(root).encode("ascii"))
    click.echo(json.dumps({"out": str(out), "sha256": pki.fingerprint(root), "subject": root.subject.rfc4514_string(),
                           "provenBy": trusted.address}))

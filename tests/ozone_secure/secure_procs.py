"""Apache Ozone's own datanodes, OM and CLIs in secure mode on this project's 3-SCM ring (`make ozone-secure-test`).

The insecure harness (:mod:`tests.ozone_interop.ozone_procs`) with Ozone's security keys on every process: Kerberos
on Hadoop RPC (`hadoop.security.authentication=kerberos`, each server logging in from its own keytab made by the test
KDC, :mod:`tests.kerberos.kdc`), `ozone.security.enabled=true`, block and container tokens enforced and gRPC TLS on.
Ozone's datanodes and OM get their certificates from our CA over Hadoop RPC (`GetDataNodeCertificate`,
`GetOMCertificate`) and their secret keys over `SCMSecretKeyProtocol`; the CLIs run with the tickets of a user
(`kinit -kt`, `KRB5CCNAME`). Our SCMs read the very keys Ozone's processes are given, plus what only our ring has:
its enrolment secrets and its gRPC security service's port (`ozone.scm.security.service.grpc.port`).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import struct
from pathlib import Path

from tests.kerberos.kdc import MiniKdc
from tests.ozone_interop.ozone_procs import (
    LOOPBACK,
    SCM_SERVICE_ID,
    DatanodeNode,
    OzoneCluster,
    PortAllocator,
    ScmNode,
    Timings,
)

# The host part of every service principal: Hadoop resolves `_HOST` to the canonical name of the address a server
# binds or a client dials, and 127.0.0.1 is `localhost` (ours resolves it the same way, kerberos.canonical_hostname).
HOST = "localhost"
ADMIN = "admin"  # listed in ozone.administrators
USER = "alice"  # a plain user: may write keys, may not run SCM's admin commands
NO_TICKET = "no-ticket"  # a caller whose ticket cache is empty (never kinit'ed)
RPC_PROTECTION = "privacy"  # Hadoop's strongest QOP: every frame wrapped
# The datanode (by index) whose certificate is in Ozone's renewal window from the start: its
# hdds.x509.renew.grace.duration is as long as the certificates our CA issues (hdds.x509.default.duration, P365D), so
# Ozone's CertificateRenewerService renews it as soon as it holds one. Ozone's own check wants the grace shorter than
# the datanode's hdds.x509.default.duration, which only our CA reads, so the datanode is given a longer one.
RENEWING_DATANODE = 2
RENEWAL_PROPS = {"hdds.x509.renew.grace.duration": "P365D", "hdds.x509.default.duration": "P366D"}


SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def non_loopback_address() -> str:
    """This machine's first IPv4 address outside 127.0.0.0/8 (asked of each network interface in turn).

    Ozone's own CA puts into a datanode's certificate only the addresses its certificate request names, and Ozone's
    datanodes name every address of the machine but the loopback ones; its clients check the address they dial
    against them. Ozone's datanodes on Ozone's own secure ring therefore listen on this address."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # an interface without an IPv4 address
                continue
        address = socket.inet_ntoa(answer[20:24])
        if not address.startswith("127."):
            return address
    raise RuntimeError("Ozone's own secure ring needs an IPv4 address outside 127.0.0.0/8 on this machine (its "
                       "datanodes' certificates leave loopback addresses out): give an interface one, e.g. "
                       "`ip addr add 10.0.0.2/24 dev eth0`")


class SecureOzoneCluster(OzoneCluster):
    """Our 3-SCM ring (or, with ``scm_side="ozone"``, Apache Ozone's own: the anchor of bench/failover_ozone.py
    --secure) and Ozone's 3 datanodes and OM, all Kerberized and with `ozone.security.enabled`. Ozone's SCMs get
    the same keys as ours; their ring is made as Ozone documents it for a secure cluster: `scm --init` on the
    primordial SCM makes the root CA, `scm --bootstrap` on the others gets each its certificate from it over
    Kerberos."""

    def __init__(self, base: Path, classpath: str, kdc: MiniKdc, *, timings: Timings | None = None,
                 scm_side: str = "ours") -> None:
        super().__init__(base, classpath, scm_side=scm_side, timings=timings)
        self.kdc = kdc
        ports = PortAllocator()
        taken = {p for s in self.scms for p in vars(s).values() if isinstance(p, int)}
        self.grpc_security_ports: dict[str, int] = {}
        for s in self.scms:
            port = ports.take()
            while port in taken:
                port = ports.take()
            self.grpc_security_ports[s.node_id] = port
        realm = kdc.realm
        self.principals = {role: f"{role}/_HOST@{realm}" for role in ("scm", "dn", "om")}
        # one keytab per service, holding its principal for this host (all processes share loopback)
        self.keytabs = {role: kdc.keytab(f"{role}/{HOST}", role) for role in ("scm", "dn", "om")}
        # on Ozone's own ring the datanodes listen on the machine's own address, their host name (non_loopback_address)
        self.datanode_host = non_loopback_address() if scm_side == "ozone" else None
        if self.datanode_host is not None:
            self.keytabs["dn"] = kdc.keytab(f"dn/{self.datanode_host}", "dn-own-address")
        self.ccaches = {user: kdc.kinit(user, kdc.keytab(user)) for user in (ADMIN, USER)}
        self.ccaches[NO_TICKET] = base / "no-ticket.ccache"  # never written
        secret_dir = base / "secrets"
        secret_dir.mkdir(parents=True, exist_ok=True)
        self.secret_files: dict[str, Path] = {}
        for role in ("scm", "datanode"):
            path = secret_dir / f"{role}.secret"
            path.write_text(secrets.token_hex(32) + "\n")
            path.chmod(0o600)
            self.secret_files[role] = path

    # ---------------------------------------------------------------- configuration (Ozone's own keys)

    def common_props(self) -> dict[str, str]:
        return {
            **super().common_props(),
            "ozone.security.enabled": "true",
            "hadoop.security.authentication": "kerberos",
            "hadoop.rpc.protection": RPC_PROTECTION,
            "hdds.block.token.enabled": "true",
            "hdds.container.token.enabled": "true",
            "hdds.grpc.tls.enabled": "true",
            "hdds.scm.kerberos.principal": self.principals["scm"],
            "hdds.datanode.kerberos.principal": self.principals["dn"],
            "ozone.om.kerberos.principal": self.principals["om"],
            "ozone.administrators": ADMIN,
        }

    def our_scm_props(self, scm: object) -> dict[str, str]:
        props = super().our_scm_props(scm)  # type: ignore[arg-type]
        for s in self.scms:
            props[f"ozone.scm.security.service.grpc.port.{SCM_SERVICE_ID}.{s.node_id}"] = str(
                self.grpc_security_ports[s.node_id])
        props.update({
            "hdds.scm.kerberos.keytab.file": str(self.keytabs["scm"]),
            "ozone.scm.security.enrollment.scm.secret.file": str(self.secret_files["scm"]),
            "ozone.scm.security.enrollment.datanode.secret.file": str(self.secret_files["datanode"]),
            # one machine: the ring's members enrol from 127.0.0.1, which a real cluster refuses
            "ozone.scm.security.enrollment.loopback.allowed": "true",
            "ozone.http.policy": "HTTP_ONLY",
        })
        return props

    def scm_props(self, scm: ScmNode) -> dict[str, str]:
        """Ozone's own SCM (the anchor): its keytab; everything else comes from the shared keys."""
        return {**super().scm_props(scm), "hdds.scm.kerberos.keytab.file": str(self.keytabs["scm"]),
                "ozone.http.policy": "HTTP_ONLY"}

    def datanode_address(self, dn: DatanodeNode) -> str:
        return self.datanode_host or super().datanode_address(dn)

    def datanode_props(self, dn: object) -> dict[str, str]:
        renewing = RENEWAL_PROPS if dn is self.datanodes[RENEWING_DATANODE] else {}
        own = {"hdds.datanode.hostname": self.datanode_host} if self.datanode_host else {}
        return {**super().datanode_props(dn),  # type: ignore[arg-type]
                "hdds.datanode.kerberos.keytab.file": str(self.keytabs["dn"]), **renewing, **own}

    def om_props(self) -> dict[str, str]:
        return {**super().om_props(), "ozone.om.kerberos.keytab.file": str(self.keytabs["om"])}

    # ---------------------------------------------------------------- processes

    def jvm_properties(self) -> list[str]:
        # Java's Kerberos reads its realm from this file, not from KRB5_CONFIG
        return [f"-Djava.security.krb5.conf={self.kdc.root / 'krb5.conf'}",
                "-Dsun.security.krb5.disableReferrals=true"]

    def tool_env(self, user: str | None) -> dict[str, str] | None:
        """A CLI runs with `user`'s tickets (the administrator's by default), as after `kinit user`."""
        who = user or ADMIN
        if who not in self.ccaches:
            raise ValueError(f"no tickets for {who!r}: the users are {sorted(self.ccaches)}")
        env = {**os.environ, **self.kdc.env(), "KRB5CCNAME": f"FILE:{self.ccaches[who]}"}
        return env


__all__ = ["ADMIN", "HOST", "LOOPBACK", "NO_TICKET", "RENEWING_DATANODE", "USER", "SecureOzoneCluster"]

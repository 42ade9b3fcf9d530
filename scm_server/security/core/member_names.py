"""The names that belong to the SCM ring's members, which no certificate of another role may carry (pure).

Who calls it: the CA server on the leader (datanode/OM enrolment, client certificates an administrator has
signed, renewals) and ``scm --init`` (the administrators' CSRs it signs), through the checks of
:mod:`scm_server.security.core.requests`. It must not do I/O: the configured hosts and the SCM certificates are
passed in.

Why: a datanode certificate for ``scm-0.scm-headless.ozone.svc.cluster.local`` does not pass as an SCM
to this project's clients (they verify the SCM role name, docs/security.md), but any client that checks host names
instead (a browser on the HTTPS page, curl, Prometheus) takes it for that SCM. A client certificate is as good: it
has no DNS name, so OpenSSL's host check falls back to its CN. So the CA refuses, for every role but SCM, the names
of the ring:

* every member's configured host (``ozone.scm.address.<serviceId>.<nodeId>``);
* every name (DNS or IP, and the host of ``CN=scm-sub@<host>``) in a valid SCM certificate;
* for a name of the Kubernetes form ``<pod>.<service>.<namespace>.svc.<domain>`` (the operator's members behind
  their headless Service): the shorter forms a Pod resolves through its search path (``<pod>``,
  ``<pod>.<service>``, ...), the headless Service's own names, and, when the Service is named
  ``<cluster>-headless`` as the operator names it, the client Service ``<cluster>``'s names.

Names compare case-insensitively and without a trailing dot; IP literals compare as addresses (``::ffff:10.0.0.1``
is ``10.0.0.1``, ``2001:db8:0::1`` is ``2001:db8::1``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping

from cryptography import x509

from scm_server.security.core.identity import hostname_of, is_reserved_name

HEADLESS_SUFFIX = "-headless"  # the operator's headless Service: <cluster>-headless; its client Service: <cluster>


def canonical_name(host: str) -> str:
    """``host`` as names are compared: an IP literal as its address, a DNS name lower-case without a trailing dot."""
    name = host.strip().rstrip(".").lower()
    try:
        addr = ipaddress.ip_address(name)
    except ValueError:
        return name
    mapped = getattr(addr, "ipv4_mapped", None)
    return str(mapped if mapped is not None else addr)


@dataclasses.dataclass(frozen=True)
class MemberNames:
    """Canonical name -> whose it is (for the refusal message), e.g. ``SCM scm-0 (its configured host ...)``."""

    owners: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def owner_of(self, host: str) -> str | None:
        return self.owners.get(canonical_name(host))

    def __len__(self) -> int:
        return len(self.owners)


def kubernetes_names(host: str) -> list[tuple[str, str]]:
    """(name, what it is) for the names a Kubernetes cluster gives the same Pod or its Services, when ``host`` is
    ``<pod>.<service>.<namespace>.svc.<domain>``; [] for any other name."""
    labels = canonical_name(host).split(".")
    if len(labels) < 5 or labels[3] != "svc" or not all(labels):
        return []
    pod, service, namespace = labels[0], labels[1], labels[2]
    domain = ".".join(labels[4:])
    out = [(pod, "its Pod name")]
    out += [(".".join(labels[:i]), f"its name through the headless Service {service}") for i in range(2, 5)]

    def service_names(name: str, what: str) -> list[tuple[str, str]]:
        return [(n, what) for n in (name, f"{name}.{namespace}", f"{name}.{namespace}.svc",
                                    f"{name}.{namespace}.svc.{domain}")]

    out += service_names(service, f"the ring's headless Service {service}.{namespace} (every member's address)")
    if service.endswith(HEADLESS_SUFFIX) and len(service) > len(HEADLESS_SUFFIX):
        client = service[: -len(HEADLESS_SUFFIX)]
        out += service_names(client, f"the ring's client Service {client}.{namespace}")
    return out


def certificate_names(cert: x509.Certificate) -> list[str]:
    """The host names and IPs ``cert`` is valid for: its DNS and IP SANs (not the reserved role names) and the
    host of an Ozone subject (``CN=<prefix>@<host>``)."""
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        names += [n for n in san.get_values_for_type(x509.DNSName) if not is_reserved_name(n)]
        names += [str(a) for a in san.get_values_for_type(x509.IPAddress)]
    values = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    if values:
        cn = values[0].value
        host = hostname_of(cn if isinstance(cn, str) else cn.decode("utf-8", errors="replace"))
        if host:
            names.append(host)
    return names


def member_names(
    configured: Mapping[str, str], certificates: Iterable[tuple[str, x509.Certificate]] = ()
) -> MemberNames:
    """The names of the ring: ``configured`` maps node id -> configured host; ``certificates`` are (member, its
    SCM certificate) for the valid SCM certificates (the caller leaves out revoked and expired ones)."""
    owners: dict[str, str] = {}

    def add(name: str, whose: str) -> None:
        key = canonical_name(name)
        if key and not is_reserved_name(key):
            owners.setdefault(key, whose)

    def add_with_kubernetes_forms(name: str, member: str, what: str) -> None:
        add(name, f"SCM {member} ({what})")
        for alias, alias_what in kubernetes_names(name):
            add(alias, f"SCM {member} ({alias_what})" if alias_what.startswith("its ") else alias_what)

    for node_id, host in sorted(configured.items()):
        add_with_kubernetes_forms(host, node_id, f"its configured host, ozone.scm.address.<serviceId>.{node_id}")
    for member, cert in certificates:
        for name in certificate_names(cert):
            add_with_kubernetes_forms(name, member, f"a name in its certificate serial {cert.serial_number}")
    return MemberNames(owners)

"""Issue 29 (6), the operator's side: the only certificate it issues that is not an SCM's (its own admin client
certificate, ``CN=ozone-scm-operator``, no DNS name) never bears a name of the ring, checked with SCM's own rule
(scm_server.security.core.member_names) over the names the operator gives the members. The one cluster name that
would make it do so (the client Service named ``ozone-scm-operator``) is refused before anything is created."""

from __future__ import annotations

import datetime

import pytest

from ozone_scm_operator import builders, certs, naming
from scm_server.security.core import certificates as pki
from scm_server.security.core.member_names import certificate_names, member_names

from .sim import World

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


def _ring_and_client(
    name: str, *, member_certificates: bool = True
) -> tuple[dict[str, str], list[tuple[str, pki.x509.Certificate]], certs.KeyPair]:
    """The members' configured hosts (as the operator writes ozone-site.xml), their sub-CA certificates and the
    operator's client certificate, for a cluster ``name`` in namespace ``ozone``."""
    ref = builders.ClusterRef(name=name, namespace="ozone", uid="u")
    root = certs.create_root_ca(pki.generate_key(pki.KeySpec("EC", 256)), cluster=name, namespace="ozone", now=NOW,
                                duration=DAY * 10, serial=1 << 64)
    members = [naming.member_name(name, i) for i in range(3)]
    props = builders.membership_properties(ref, members, members[0])
    configured = {m: props[f"ozone.scm.address.{naming.service_id(name)}.{m}"] for m in members}
    issued = [(m, certs.issue_member_certificate(root, pki.generate_key(pki.KeySpec("EC", 256)), ref=ref, member=m,
                                                  now=NOW, duration=DAY, serial=(1 << 64) + i + 1).certificate)
              for i, m in enumerate(members) if member_certificates]
    client = certs.issue_client_certificate(root, pki.generate_key(pki.KeySpec("EC", 256)), ref=ref, now=NOW,
                                            duration=DAY, serial=(1 << 64) + 9)
    return configured, issued, client


def _client_names(client: certs.KeyPair) -> list[str]:
    cn = client.certificate.subject.get_attributes_for_oid(pki.NameOID.COMMON_NAME)[0].value
    return [str(cn), *certificate_names(client.certificate)]


@pytest.mark.parametrize("name", ["scm", "ozone", "ozone-scm", "operator", "op"])
def test_the_operators_client_certificate_bears_no_name_of_the_ring(name: str) -> None:
    configured, issued, client = _ring_and_client(name)
    ring = member_names(configured, issued)
    assert ring.owner_of(f"{name}-0.{name}-headless.ozone.svc.cluster.local") is not None  # the rule sees the ring
    assert [n for n in _client_names(client) if ring.owner_of(n) is not None] == []
    assert naming.check_client_certificate_name(name) is None


def test_a_secure_cluster_named_as_the_operators_certificate_is_refused_before_anything_exists() -> None:
    # (its members' certificate names exceed 64 characters here anyway; with a one-letter namespace and cluster
    # domain they would fit, and the client Service would bear the operator certificate's CN)
    configured, issued, client = _ring_and_client(naming.MANAGER, member_certificates=False)
    ring = member_names(configured, issued)
    assert [n for n in _client_names(client) if ring.owner_of(n) is not None] == [naming.MANAGER]
    reason = naming.check_client_certificate_name(naming.MANAGER)
    assert reason is not None and "client Service" in reason and "choose another name" in reason and "\n" not in reason
    w = World({"replicas": 3, "security": {"enabled": True}}, name=naming.MANAGER)
    for _ in range(3):
        w.operator_pass()
    assert w.actions == [] and not w.pods and not w.secrets
    c = w.status.condition("Degraded")
    assert c is not None and c.status == "True" and c.reason == "InvalidName" and c.message == reason, c
    # without security there is no certificate to clash: the name is fine
    plain = World({"replicas": 3}, name=naming.MANAGER)
    for _ in range(3):
        plain.operator_pass()
    degraded = plain.status.condition("Degraded")
    assert plain.actions and (degraded is None or degraded.reason != "InvalidName"), degraded

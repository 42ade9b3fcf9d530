"""Issue 29 (6): no certificate of another role may carry a name of the SCM ring's members (pure rules).

A datanode certificate for ``scm-0.scm-headless.ozone.svc.cluster.local`` does not pass as an SCM to this project's
clients (they verify the SCM role name), but a client that checks host names (a browser, curl, Prometheus) takes it
for that SCM; a client certificate's CN is read as a host name by OpenSSL when it has no DNS name. The CA refuses the
members' configured hosts, the names in their certificates and the Kubernetes names of their Pods and Services, for
datanodes, OMs, clients (signed or at ``--init``) and renewals."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError
from scm_server.security import init as sec_init
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.core import requests as reqs
from scm_server.security.core.member_names import (
    canonical_name,
    certificate_names,
    kubernetes_names,
    member_names,
)

from .pki_helpers import CLUSTER, EC, NOW

K8S_HOST = "scm-0.scm-headless.ozone.svc.cluster.local"
CONFIGURED = {"scm-0": K8S_HOST, "scm-1": "scm-1.scm-headless.ozone.svc.cluster.local"}


def _scm_certificate(host: str, extra: tuple[str, ...], serial: int = 7) -> x509.Certificate:
    """An SCM sub-CA naming ``host`` and ``extra`` (DNS names or IPs), as a member's certificate may."""
    root_key = pki.generate_key(EC)
    root = pki.build_root_ca(root_key, ids.root_ca_subject("root", "r", CLUSTER), serial=1, now=NOW,
                             lifetime=timedelta(days=2), spec=EC)
    subject = ids.scm_subject(host, "scm-uuid-2", CLUSTER)
    subject = pki.SubjectInfo(subject.common_name, subject.owner_id, subject.cluster_id, (host, *extra),
                              subject.role_names, subject.uris)
    return pki.issue_certificate(subject, pki.generate_key(EC).public_key(), issuer=root, issuer_key=root_key,
                                 serial=serial, now=NOW, lifetime=timedelta(days=1), profile=pki.Profile.SUB_CA, spec=EC)


def _policy(*, loopback: bool = False, certs: tuple[tuple[str, x509.Certificate], ...] = (),
            configured: dict[str, str] | None = None) -> reqs.HostPolicy:
    configured = CONFIGURED if configured is None else configured
    return reqs.HostPolicy(allow_loopback=loopback, scm_hosts=frozenset(configured.values()),
                           members=member_names(configured, certs))


def _datanode(host: str, policy: reqs.HostPolicy, ip: str = "") -> reqs.Approved:
    csr = pki.build_csr(pki.generate_key(EC), ids.datanode_subject("csr-host", "u1", CLUSTER), EC)
    return reqs.approve_node_request(csr, role=ids.Role.DATANODE, cluster_id=CLUSTER, claimed_cluster_id=CLUSTER,
                                     owner_id="u1", hostname=host, ip=ip, policy=policy)


def test_names_compare_case_insensitively_without_trailing_dot_and_ips_as_addresses() -> None:
    assert canonical_name("SCM-0.Example.COM.") == "scm-0.example.com"
    assert canonical_name("::ffff:10.0.0.7") == "10.0.0.7"
    assert canonical_name("2001:DB8:0:0::1") == "2001:db8::1"


def test_the_kubernetes_names_of_a_member_and_of_its_services() -> None:
    names = dict(kubernetes_names(K8S_HOST))
    for pod_form in ("scm-0", "scm-0.scm-headless", "scm-0.scm-headless.ozone", "scm-0.scm-headless.ozone.svc"):
        assert pod_form in names
    for service in ("scm-headless", "scm"):  # the headless Service and the client Service the operator names
        for form in (service, f"{service}.ozone", f"{service}.ozone.svc", f"{service}.ozone.svc.cluster.local"):
            assert form in names, form
    assert "headless Service scm-headless.ozone" in names["scm-headless.ozone.svc.cluster.local"]
    assert "client Service scm.ozone" in names["scm.ozone.svc.cluster.local"]
    # not the Kubernetes form: no aliases
    assert kubernetes_names("scm1.example.com") == [] and kubernetes_names("10.0.0.1") == []


@pytest.mark.parametrize(
    ("host", "member", "what"),
    [
        (K8S_HOST, "SCM scm-0", "configured host"),  # the issue's example
        ("SCM-0.scm-headless.ozone.svc.cluster.local.", "SCM scm-0", "configured host"),
        ("scm-0.scm-headless.ozone.svc", "SCM scm-0", "headless Service"),
        ("scm-0.scm-headless", "SCM scm-0", "headless Service"),
        ("scm-1", "SCM scm-1", "Pod name"),
        ("scm-headless.ozone.svc.cluster.local", "the ring's headless Service", "every member"),
        ("scm.ozone.svc.cluster.local", "the ring's client Service scm.ozone", "client Service"),
        ("scm.ozone", "the ring's client Service scm.ozone", "client Service"),
    ],
)
def test_a_datanode_may_not_name_a_member_or_its_services(host: str, member: str, what: str) -> None:
    with pytest.raises(reqs.RequestRejected) as info:
        _datanode(host, _policy())
    message = str(info.value)
    assert info.value.code == "PERMISSION_DENIED"
    assert f"host name {host!r} belongs to {member}" in message and what in message, message
    assert "datanode certificate cannot carry a name of the SCM ring" in message and "\n" not in message


def test_names_in_the_members_certificates_are_refused_for_host_and_ip() -> None:
    cert = _scm_certificate("scm2.example.com", ("scm.example.org", "10.1.2.3", "2001:db8::5"), serial=42)
    assert set(certificate_names(cert)) == {"scm2.example.com", "scm.example.org", "10.1.2.3", "2001:db8::5"}
    policy = _policy(certs=(("scm2", cert),), configured={})
    for host, ip in (("scm.example.org", ""), ("SCM2.example.com.", ""), ("dn1.example.com", "10.1.2.3"),
                     ("dn1.example.com", "::ffff:10.1.2.3"), ("dn1.example.com", "2001:db8:0::5")):
        with pytest.raises(reqs.RequestRejected, match=r"belongs to SCM scm2 \(a name in its certificate serial 42\)"):
            _datanode(host, policy, ip)
    # the reserved role name is the CA's, not a host: refused by its own rule, never listed as a member's name
    assert "scm.ozone-scm.invalid" not in policy.members.owners


def test_a_node_of_its_own_name_passes_and_om_and_ip_checks_apply_too() -> None:
    policy = _policy()
    for host in ("dn-0.dn-headless.ozone.svc.cluster.local", "scm-00.scm-headless.ozone.svc.cluster.local",
                 "scm-0.scm-headless.other.svc.cluster.local", "dn-0"):
        assert _datanode(host, policy, "10.0.0.12").subject.common_name == f"dn@{host}"
    csr = pki.build_csr(pki.generate_key(EC), ids.om_subject("om", "om1", CLUSTER), EC)
    with pytest.raises(reqs.RequestRejected, match="OM certificate cannot carry a name of the SCM ring"):
        reqs.approve_node_request(csr, role=ids.Role.OM, cluster_id=CLUSTER, claimed_cluster_id=CLUSTER,
                                  owner_id="om1", hostname="scm-1.scm-headless", policy=policy)


def test_loopback_member_names_are_exempt_only_where_loopback_is_allowed() -> None:
    local = {"scm1": "127.0.0.1", "scm2": "localhost"}
    _datanode("127.0.0.1", _policy(loopback=True, configured=local))
    _datanode("localhost", _policy(loopback=True, configured=local))
    with pytest.raises(reqs.RequestRejected, match="loopback"):
        _datanode("127.0.0.1", _policy(configured=local))


def test_a_client_certificate_may_not_be_named_as_a_member() -> None:
    policy = _policy()
    for user in (K8S_HOST, "scm-0", "scm"):
        csr = pki.build_csr(pki.generate_key(EC), ids.client_subject(user), EC)
        with pytest.raises(reqs.RequestRejected, match=rf"user name \(CN\) '{user}' belongs to .*client certificate "
                                                       "cannot carry"):
            reqs.approve_client_request(csr, cluster_id=CLUSTER, policy=policy)
    csr = pki.build_csr(pki.generate_key(EC), ids.client_subject("alice"), EC)
    assert reqs.approve_client_request(csr, cluster_id=CLUSTER, policy=policy).owner_id == "alice"


def _issued(subject: pki.SubjectInfo) -> x509.Certificate:
    root_key = pki.generate_key(EC)
    root = pki.build_root_ca(root_key, ids.root_ca_subject("root", "r", CLUSTER), serial=1, now=NOW,
                             lifetime=timedelta(days=2), spec=EC)
    return pki.issue_certificate(subject, pki.generate_key(EC).public_key(), issuer=root, issuer_key=root_key,
                                 serial=99, now=NOW, lifetime=timedelta(days=1), profile=pki.Profile.END_ENTITY, spec=EC)


def test_a_certificate_naming_what_became_a_member_name_is_not_renewed() -> None:
    # an SCM added at a host (or IP) a datanode's certificate names, or named as a user
    policy = _policy(certs=(("scm-2", _scm_certificate("scm-2.example.com", ("10.1.2.3",))),))
    csr = pki.build_csr(pki.generate_key(EC), pki.SubjectInfo("ignored"), EC)
    for subject, member in ((ids.datanode_subject("scm-1.scm-headless.ozone.svc.cluster.local", "u1", CLUSTER), "scm-1"),
                            (ids.datanode_subject("dn-1", "u1", CLUSTER, "10.1.2.3"), "scm-2"),
                            (ids.client_subject("scm-1"), "scm-1")):
        current = _issued(subject)
        with pytest.raises(reqs.RequestRejected, match=rf"certificate serial 99 cannot be renewed: .* belongs to SCM "
                                                       rf"{member}"):
            reqs.approve_renewal(csr, current=current, identity=ids.identity_of(current), cluster_id=CLUSTER,
                                 policy=policy)
    # a datanode of its own name renews; an SCM's own sub-CA naming its host renews (the role may carry it)
    current = _issued(ids.datanode_subject("dn-1", "u1", CLUSTER))
    reqs.approve_renewal(csr, current=current, identity=ids.identity_of(current), cluster_id=CLUSTER, policy=policy)
    scm = _scm_certificate(K8S_HOST, ())
    reqs.approve_renewal(csr, current=scm, identity=ids.identity_of(scm), cluster_id=CLUSTER, policy=policy)


def test_init_refuses_an_administrators_csr_named_as_a_member(tmp_path: Path) -> None:
    csr_file = tmp_path / "scm0.csr"
    csr_file.write_text(pki.csr_pem(pki.build_csr(pki.generate_key(EC), ids.client_subject(K8S_HOST), EC)))
    config = SecurityConfig.from_conf(OzoneConfiguration({
        "ozone.security.enabled": "true", "hdds.grpc.tls.enabled": "true", "hdds.key.algo": "EC",
        "hdds.key.len": "256", "hdds.x509.signature.algorithm": "SHA256withECDSA",
        "ozone.scm.security.admin.csr.files": str(csr_file),
    }))
    with pytest.raises(ConfigError, match=rf"{csr_file}: user name \(CN\) '{K8S_HOST}' belongs to SCM scm-0"):
        sec_init.initialize_primordial(config, metadata_dir=tmp_path / "meta", cluster_id=CLUSTER, scm_id="s1",
                                       hostname="scm-1.scm-headless.ozone.svc.cluster.local", now=NOW,
                                       member_hosts=CONFIGURED)

"""The reconciler's security actions wired to their effects: what it hands the SCM side and what it writes back into
Secrets (CA mode scm: the operator's key, CSR and certificate; scale-down: the revocation and its mark). The
Kubernetes API and the SCMs are replaced by recording fakes (below the unit boundary); the certificates are real."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import builders, certs, naming, planner
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.effects.scm import Endpoint
from ozone_scm_operator.model import ClusterStatus, Observed, PodObs, SCMObs
from ozone_scm_operator.observations import Reads, secret_obs
from ozone_scm_operator.reconciler import Observation, Reconciler, new_serial
from ozone_scm_operator.spec import read_spec
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.core import requests as reqs

REF = ClusterRef(name="scm", namespace="ns", uid="u")
NOW = datetime.datetime.now(datetime.UTC)
SPEC = pki.KeySpec("EC", 256, "SHA256withECDSA")


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, name))

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        key = (body["kind"], body["metadata"]["name"])
        assert key not in self.objects, f"{key} created twice"
        if "stringData" in body:
            body = {**body, "data": {k: base64.b64encode(v.encode()).decode() for k, v in body["stringData"].items()}}
        self.objects[key] = body
        return body

    async def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.objects[(body["kind"], body["metadata"]["name"])] = body
        return body

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any], *,
                          subresource: str | None = None) -> dict[str, Any]:
        obj = self.objects[(kind, name)]
        obj["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
        return obj


class FakeSCM:
    """An SCM CA: a root, the CSR it signed at --init, renewals and revocations, as the operator's calls see them."""

    def __init__(self) -> None:
        self.root_key = pki.generate_key(SPEC)
        self.root = pki.build_root_ca(self.root_key, ids.root_ca_subject("scm-0.h", "s0", "CID"), serial=1, now=NOW,
                                      lifetime=datetime.timedelta(days=3650), spec=SPEC)
        self.by_key: dict[str, x509.Certificate] = {}
        self.calls: list[tuple[str, Any]] = []

    def sign(self, csr: x509.CertificateSigningRequest) -> x509.Certificate:
        approved = reqs.approve_client_request(csr, cluster_id="CID")
        cert = pki.issue_certificate(approved.subject, approved.public_key, issuer=self.root, issuer_key=self.root_key,
                                     serial=new_serial(), now=NOW, lifetime=datetime.timedelta(days=365),
                                     profile=approved.profile, spec=SPEC)
        self.by_key[pki.public_key_sha256(cert.public_key())] = cert
        return cert

    async def fetch_client_certificate(
        self, ep: Endpoint, scm_secret: bytes, public_key_sha256: str
    ) -> tuple[list[x509.Certificate], x509.Certificate]:
        self.calls.append(("fetch", (ep, scm_secret)))
        return [self.by_key[public_key_sha256]], self.root

    async def renew_client_certificate(
        self, endpoints: Sequence[Endpoint], csr_pem: str, security: Any
    ) -> tuple[list[x509.Certificate], x509.Certificate]:
        self.calls.append(("renew", security))
        return [self.sign(x509.load_pem_x509_csr(csr_pem.encode()))], self.root

    async def revoke(self, endpoints: Sequence[Endpoint], serials: Sequence[str], reason: int, security: Any) -> list[str]:
        self.calls.append(("revoke", (list(serials), reason, security is not None, [e.member for e in endpoints])))
        return list(serials)


def _seen(r: Reconciler, kube: FakeKube, st: ClusterStatus, pods: Mapping[str, PodObs],
          scms: Mapping[str, SCMObs] | None = None) -> Observation:
    """What ``observe`` hands a step: the planner's view, and the Secrets' data as a LIST from the API server carries
    it (the payload ``Reconciler.observe`` keeps in ``reads``); the identity built from them as it builds it."""
    reads = Reads(secret_data={n: o.get("data") or {} for (k, n), o in kube.objects.items() if k == "Secret"})
    client = kube.objects.get(("Secret", naming.operator_client_secret_name(REF.name)))
    security = r.client_security(REF, True, reads, secret_obs(client) if client else None)
    spec, problems, applied = read_spec({"replicas": 1}, None)
    return Observation({}, REF, st, spec, problems, applied, Observed(now=NOW, pods=pods, scms=scms or {}), reads,
                       security)


def _secret_data(kube: FakeKube, name: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in kube.objects[("Secret", name)]["data"].items()}


async def test_ca_mode_scm_key_csr_fetch_and_renew() -> None:
    kube, scm = FakeKube(), FakeSCM()
    r = Reconciler(kube, scm)  # type: ignore[arg-type]
    st = ClusterStatus.from_raw({"primordialMember": "scm-0"})
    pod = PodObs(name="scm-0", phase="Running", ready=True, pod_ip="10.0.0.7")
    await r.act(REF, planner.CreateEnrollmentSecret(target="scm-enrollment", reason="", message="", scm=True),
                _seen(r, kube, st, {}))
    assert len(_secret_data(kube, "scm-enrollment")[naming.ENROLLMENT_SCM]) == 64
    await r.act(REF, planner.CreateClientKey(target="scm-operator-client", reason="", message=""),
                _seen(r, kube, st, {}))
    assert set(_secret_data(kube, "scm-operator-client")) == {builders.TLS_KEY}  # the key only
    assert _seen(r, kube, st, {}).security is None  # no certificate yet: the operator cannot call any SCM
    await r.act(REF, planner.CreateAdminCSR(target="scm-admin-csr", reason="", message=""), _seen(r, kube, st, {}))
    csr = x509.load_pem_x509_csr(_secret_data(kube, "scm-admin-csr")[naming.ADMIN_CSR_FILE])
    key_obs = secret_obs(kube.objects[("Secret", "scm-operator-client")])
    assert secret_obs(kube.objects[("Secret", "scm-admin-csr")]).public_key == key_obs.public_key is not None
    first = scm.sign(csr)  # what the primordial does at --init
    await r.act(REF, planner.FetchClientCertificate(target="scm-operator-client", reason="", message="", member="scm-0"),
                _seen(r, kube, st, {"scm-0": pod}))
    ep, proof_secret = scm.calls[-1][1]
    assert ep == Endpoint("scm-0", "10.0.0.7", REF.host("scm-0"))
    assert proof_secret == _secret_data(kube, "scm-enrollment")[naming.ENROLLMENT_SCM]
    data = _secret_data(kube, "scm-operator-client")
    assert x509.load_pem_x509_certificates(data[builders.TLS_CERT]) == [first, scm.root]
    assert serialization.load_pem_private_key(data[builders.TLS_KEY], None).public_key() == first.public_key()
    fetched = secret_obs(kube.objects[("Secret", "scm-operator-client")])
    assert fetched.certificate_not_after == first.not_valid_after_utc.replace(microsecond=0)
    assert fetched.certificate_not_before == first.not_valid_before_utc.replace(microsecond=0)
    assert _seen(r, kube, st, {}).security is not None  # now it can
    # renewal: a new key, signed by SCM while the operator presents the current certificate
    await r.act(REF, planner.RenewClientCertificate(target="scm-operator-client", reason="", message=""),
                _seen(r, kube, st, {"scm-0": pod}, {"scm-0": SCMObs("scm-0", "CID", "s0", "s0", 1)}))
    assert scm.calls[-1][0] == "renew" and scm.calls[-1][1] is not None
    renewed = x509.load_pem_x509_certificates(_secret_data(kube, "scm-operator-client")[builders.TLS_CERT])[0]
    assert renewed != first and renewed.public_key() != first.public_key()
    key = serialization.load_pem_private_key(_secret_data(kube, "scm-operator-client")[builders.TLS_KEY], None)
    assert key.public_key() == renewed.public_key()


async def test_revocation_sends_scms_decimal_serial_then_marks_the_secret() -> None:
    kube, scm = FakeKube(), FakeSCM()
    r = Reconciler(kube, scm)  # type: ignore[arg-type]
    root = certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster="scm", namespace="ns", now=NOW,
                                duration=datetime.timedelta(days=10), serial=new_serial())
    pair = certs.issue_client_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, now=NOW,
                                          duration=datetime.timedelta(days=1), serial=new_serial())
    await kube.apply(certs.client_tls_secret(REF, pair, root.certificate))
    member = certs.issue_member_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, member="scm-2",
                                            now=NOW, duration=datetime.timedelta(days=1), serial=new_serial())
    await kube.apply(certs.member_tls_secret(REF, "scm-2", member, root.certificate))
    st = ClusterStatus.from_raw({"leader": "scm-0"})
    pods = {"scm-0": PodObs(name="scm-0", phase="Running", ready=True, pod_ip="10.0.0.1")}
    action = planner.RevokeCertificate(target="scm-2-tls", reason="", message="",
                                       serial=str(member.certificate.serial_number), revocation_reason=5)
    await r.act(REF, action, _seen(r, kube, st, pods, {"scm-0": SCMObs("scm-0", "CID", "s0", "s0", 1)}))
    assert scm.calls == [("revoke", ([str(member.certificate.serial_number)], 5, True, ["scm-0"]))]
    assert secret_obs(kube.objects[("Secret", "scm-2-tls")]).revoked


"""A secure restore's root CA as the operator reads it (``observations.root_ca_obs``): the fingerprint of the
certificate actually in ``ca.crt`` (not an annotation), and why the Secret cannot be the root (no key, a key of
another certificate, no certificate); ``spec.bootstrap.rootCASecret`` as parsed."""

from __future__ import annotations

import base64
import datetime

from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import certs
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.model import RootCAObs
from ozone_scm_operator.observations import root_ca_obs
from ozone_scm_operator.spec import parse_spec

NOW = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)
REF = ClusterRef(name="old", namespace="ozone", uid="u-1")


def root(cluster: str = "old") -> certs.KeyPair:
    return certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster=cluster, namespace="ozone", now=NOW,
                                duration=datetime.timedelta(days=3650), serial=certs.EXTERNAL_SERIAL_FLOOR + 7)


def test_the_root_ca_secret_of_a_deleted_cluster_reads_with_the_fingerprint_of_its_certificate() -> None:
    pair = root()
    secret = certs.root_ca_secret(REF, pair)
    secret["metadata"]["annotations"] = {}  # the fingerprint comes from ca.crt, never from an annotation
    assert root_ca_obs("old-root-ca", secret) == RootCAObs("old-root-ca", pair.fingerprint, has_key=True)
    assert root_ca_obs("old-root-ca", None) is None


def test_a_secret_without_the_key_or_with_another_key_or_no_certificate_is_not_a_root() -> None:
    pair, other = root(), root("other")
    secret = certs.root_ca_secret(REF, pair)
    del secret["data"][certs.ROOT_KEY]
    got = root_ca_obs("s", secret)
    assert got is not None and got.fingerprint == pair.fingerprint and got.problem is not None
    assert "has no ca.key" in got.problem
    secret["data"][certs.ROOT_KEY] = base64.b64encode(other.key_pem).decode()
    got = root_ca_obs("s", secret)
    assert got is not None and got.problem == "the root CA certificate does not match its private key"
    got = root_ca_obs("s", {"metadata": {"name": "s"}, "data": {}})
    assert got is not None and got.fingerprint is None and got.problem == "it has no ca.crt"


def test_root_ca_secret_is_read_as_a_secret_name() -> None:
    spec, problems = parse_spec({"bootstrap": {"fromBackup": "b1", "rootCASecret": "old-root-ca"}})
    assert spec.bootstrap.root_ca_secret == "old-root-ca" and not problems
    spec, problems = parse_spec({"bootstrap": {"fromBackup": "b1", "rootCASecret": "Not/A_Name"}})
    assert spec.bootstrap.root_ca_secret is None
    assert [p.field for p in problems] == ["bootstrap.rootCASecret"]

"""Raw Kubernetes objects -> observed values (``observations``): Pods, volumes, Secrets, and the key material a
security step reads from the pass's ``Reads``."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import builders, certs, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.observations import (
    Reads,
    child_entries,
    client_identity,
    client_key,
    enrollment_proof,
    metadata_entries,
    pod_obs,
    pvc_obs,
    restore_root,
    root_pair,
    secret_obs,
)

REF = ClusterRef(name="scm", namespace="ns", uid="u")
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_pod_observation() -> None:
    pod = {
        "metadata": {"name": "scm-1", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {naming.ANN_REVISION: "r1", naming.ANN_INIT_MODE: "bootstrap"}},
        "status": {
            "phase": "Running", "podIP": "10.0.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "bootstrap", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                       "lastState": {"terminated": {"exitCode": 1, "message": "Could not bootstrap"}},
                                       "restartCount": 3}],
        },
    }
    p = pod_obs(pod)
    assert p.ready and p.running and p.revision == "r1" and p.pod_ip == "10.0.0.5"
    assert p.trouble() == "init container bootstrap CrashLoopBackOff (last exit 1: Could not bootstrap)"
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    assert pod_obs(pod).deleting and not pod_obs(pod).running


def test_pvc_and_secret_observation() -> None:
    pvc = pvc_obs({"metadata": {"name": "scm-0-data"}, "spec": {"storageClassName": "fast"}, "status": {"phase": "Bound"}})
    assert pvc.phase == "Bound" and pvc.storage_class_name == "fast" and not pvc.deleting
    s = secret_obs({"metadata": {"name": "scm-0-tls", "annotations": {
        naming.ANN_CERT_SERIAL: "1f", naming.ANN_CERT_NOT_AFTER: "2026-02-01T00:00:00Z", naming.ANN_ROOT_FINGERPRINT: "ab"}}})
    assert s.certificate_serial == "1f" and s.root_fingerprint == "ab" and s.certificate_not_after is not None
    assert not s.revoked
    marked = secret_obs({"metadata": {"name": "scm-1-tls", "annotations": {naming.ANN_CERT_REVOKED: "true"}}})
    assert marked.revoked


def test_children_and_metadata_entries() -> None:
    objs = [{"metadata": {"name": "scm-config", "annotations": {naming.ANN_CONTENT_HASH: "h"}, "resourceVersion": "5",
                          "ownerReferences": [{"uid": "u", "controller": True}]}},
            {"metadata": {"name": "scm-pdb"}}]
    hashes, owners = child_entries("ConfigMap", objs)
    assert hashes == {("ConfigMap", "scm-config"): "h", ("ConfigMap", "scm-pdb"): None}
    assert owners == {("ConfigMap", "scm-config"): "u", ("ConfigMap", "scm-pdb"): None}
    assert metadata_entries("ConfigMap", objs)[("ConfigMap", "scm-config")]["resourceVersion"] == "5"


def _root() -> certs.KeyPair:
    return certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster="scm", namespace="ns", now=NOW,
                                duration=datetime.timedelta(days=10), serial=certs.EXTERNAL_SERIAL_FLOOR + 1)


def test_root_pair_and_a_restore_checks_the_fingerprint() -> None:
    root = _root()
    secret = certs.root_ca_secret(REF, root)
    reads = Reads(secret_data={"src": secret["data"]})
    assert root_pair(reads, "src").fingerprint == root.fingerprint
    assert restore_root(reads, "src", root.fingerprint).fingerprint == root.fingerprint
    with pytest.raises(RuntimeError, match="changed under the restore"):
        restore_root(reads, "src", "00" * 32)
    with pytest.raises(RuntimeError, match="Secret other has no root CA"):
        root_pair(reads, "other")


def test_client_key_identity_and_enrollment_proof() -> None:
    root = _root()
    pair = certs.issue_client_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, now=NOW,
                                          duration=datetime.timedelta(days=1), serial=certs.EXTERNAL_SERIAL_FLOOR + 2)
    data = certs.client_tls_secret(REF, pair, root.certificate)["data"]
    reads = Reads(secret_data={"client": data, "only-key": {builders.TLS_KEY: data[builders.TLS_KEY]},
                               "enrol": {naming.ENROLLMENT_SCM: base64.b64encode(b"proof").decode()}})
    assert client_key(reads, "client").public_key() == pair.certificate.public_key()
    identity = client_identity(reads, "client", "s1")
    assert identity is not None and identity.root == root.certificate and identity.chain == (pair.certificate,)
    assert client_identity(reads, "only-key", "") is None  # the key only: no certificate yet
    assert enrollment_proof(reads, "enrol") == b"proof"
    with pytest.raises(RuntimeError, match=f"has no {naming.ENROLLMENT_SCM}"):
        enrollment_proof(reads, "client")
    with pytest.raises(RuntimeError, match=f"has no {builders.TLS_KEY}"):
        client_key(reads, "enrol")
    assert "secret_data" not in repr(reads)  # key material never in a log line

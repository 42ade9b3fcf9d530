"""A hand-written SCM HA ring as Kubernetes objects: the container recipe of docs/operations.md, as Pods.

Used by the kubelet fixture's SCM tests (``test_scm_ring.py``: real SCM processes) and the container scenario
(``tests/e2e/container/``: podman containers from the built image). It is the recipe a user without the operator
would write, not the operator's builders (those live in ``operator/``): one ConfigMap with ``ozone-site.xml``, a
headless Service that publishes not-ready addresses (members resolve each other while they bootstrap), one PVC and
one Pod per member. Each Pod runs an init container ``bash -c 'ozone-scm scm --init && ozone-scm scm --bootstrap'``
(``--init`` is a no-op except on the primordial member, ``--bootstrap`` a no-op on it; ``bash``, not ``sh``, keeps
the ``OZONE-SITE.XML_*`` variables) and then the daemon ``ozone-scm scm``, ready on ``/ready?member=true``. A
datanode-simulator Pod (the same image, ``ozone-scm datanode-sim``) lets the ring leave safemode and allocate
blocks. Pure: returns bodies, does no I/O.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

Obj = dict[str, Any]
SERVICE_ID = "scmservice"
# the SCM's default ports: Ozone's protocols over Hadoop RPC on Ozone's numbers, ours over gRPC on our own
PORTS = {"client-hadoop": 9860, "datanode-hadoop": 9861, "block-hadoop": 9863, "security-hadoop": 9961,
         "client-grpc": 19860, "datanode-grpc": 19861, "block-grpc": 19863, "http": 9876, "ratis": 9894,
         "inter-scm": 9895}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def member_names(name: str, replicas: int) -> list[str]:
    return [f"{name}-{i}" for i in range(replicas)]


def fqdn(member: str, name: str, namespace: str) -> str:
    return f"{member}.{name}-headless.{namespace}.svc.cluster.local"


def ozone_site(name: str, namespace: str, replicas: int, extra: dict[str, str] | None = None) -> str:
    members = member_names(name, replicas)
    props = {
        "ozone.scm.service.ids": SERVICE_ID,
        f"ozone.scm.nodes.{SERVICE_ID}": ",".join(members),
        "ozone.scm.primordial.node.id": members[0],
        "ozone.metadata.dirs": "/data/metadata",
        "ozone.scm.http-address": f"0.0.0.0:{PORTS['http']}",
        # Safemode leaves once the simulated datanodes have registered and reported.
        "hdds.scm.safemode.min.datanode": "3",
        **{f"ozone.scm.address.{SERVICE_ID}.{m}": fqdn(m, name, namespace) for m in members},
        **(extra or {}),
    }
    body = "\n".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
                     for k, v in props.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}\n</configuration>\n'


def ring_objects(name: str, namespace: str, replicas: int, image: str, *, storage: str = "1Gi",
                 extra_site: dict[str, str] | None = None, datanodes: int = 3) -> list[Obj]:
    labels = {"app.kubernetes.io/name": "ozone-scm", "app.kubernetes.io/instance": name}
    objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": f"{name}-config", "namespace": namespace, "labels": labels},
         "data": {"ozone-site.xml": ozone_site(name, namespace, replicas, extra_site)}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": f"{name}-headless", "namespace": namespace, "labels": labels},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels,
                  "ports": [{"name": k, "port": v} for k, v in PORTS.items()]}},
    ]
    env = [{"name": "OZONE_CONF_DIR", "value": "/etc/ozone"}]
    mounts = [{"name": "data", "mountPath": "/data"}, {"name": "config", "mountPath": "/etc/ozone", "readOnly": True}]
    for member in member_names(name, replicas):
        objects.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-{member}", "namespace": namespace, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}})
        member_env = [*env, {"name": "OZONE-SITE.XML_ozone.scm.node.id", "value": member}]
        objects.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": member, "namespace": namespace, "labels": {**labels, "member": member}},
            "spec": {
                "hostname": member, "subdomain": f"{name}-headless", "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 10,
                # admissible where the namespace enforces Pod Security `restricted`, as the operator's Pods are
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "initContainers": [{
                    "name": "init-bootstrap", "image": image, "securityContext": RESTRICTED_CONTAINER,
                    "command": ["bash", "-c", "ozone-scm scm --init && ozone-scm scm --bootstrap"],
                    "env": member_env, "volumeMounts": mounts}],
                "containers": [{
                    "name": "scm", "image": image, "command": ["ozone-scm", "scm"], "env": member_env,
                    "securityContext": RESTRICTED_CONTAINER, "volumeMounts": mounts,
                    "ports": [{"name": k, "containerPort": v} for k, v in PORTS.items()],
                    "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1,
                                     "failureThreshold": 120},
                    "readinessProbe": {"httpGet": {"path": "/ready?member=true", "port": "http"},
                                       "periodSeconds": 1, "failureThreshold": 2},
                    "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5,
                                      "failureThreshold": 6}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{member}"}},
                            {"name": "config", "configMap": {"name": f"{name}-config"}}],
            }})
    if datanodes:
        objects.append(datanode_pod(name, namespace, member_names(name, replicas), image, datanodes))
    return objects


def datanode_pod(name: str, namespace: str, members: list[str], image: str, count: int = 3) -> Obj:
    """Simulated datanodes (``ozone-scm datanode-sim``) reporting to every member by its cluster DNS name, with
    the ring's ``<name>-config`` ConfigMap (the operator's ConfigMap has the same name) as their configuration."""
    scms = ",".join(f"{fqdn(m, name, namespace)}:{PORTS['datanode-grpc']}" for m in members)
    admin = ",".join(f"{fqdn(m, name, namespace)}:{PORTS['client-grpc']}" for m in members)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-datanodes", "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "ozone-datanode-sim"}},
        "spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 5,
                 # admissible where the namespace enforces Pod Security `restricted` (as the operator's tiers do)
                 "automountServiceAccountToken": False,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "datanodes", "image": image,
                                 "securityContext": RESTRICTED_CONTAINER,
                                 "command": ["ozone-scm", "--conf", "/etc/ozone", "datanode-sim", "--count",
                                             str(count), "--scm", scms, "--admin-scm", admin,
                                             "--heartbeat-interval", "1s"],
                                 "volumeMounts": [{"name": "config", "mountPath": "/etc/ozone", "readOnly": True}]}],
                 "volumes": [{"name": "config", "configMap": {"name": f"{name}-config"}}]}}

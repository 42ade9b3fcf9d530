"""The operator's scenarios (``tests/e2e/scenarios.py``) on the node tier's real single node: the kind tier's
environment (``tests/e2e/kind/kind_env.kind_environment``) unchanged, given this node in place of a kind cluster.

So, per scenario: a namespace enforcing ``restricted``, the chart installed with ``helm install``, the operator the
chart's Deployment Pod run by kubelet from the project's image (``kind_env.PodOperatorEnv``: it reaches the API
server through the ``kubernetes`` Service, kube-proxy's rules, with its ServiceAccount's projected token) -- or, for
the scenarios that need a process of this machine (failpoints, gates, two identities), a host process as the chart's
ServiceAccount with the Deployment scaled to 0 --, every member Pod
scheduled by kube-scheduler and run by kubelet and containerd from the project's image, probes and restarts by
kubelet, Services by kube-proxy, DNS by CoreDNS, volumes the node's static local PersistentVolumes. What the kind
tier does through ``docker exec`` into a node, ``Nodes`` does here directly: the container's PID from containerd for
``kill``, the PersistentVolume's local path for ``pvc_dir``. The operator reaches members by Pod IP through the
route ``cluster.Node`` adds to the Pod subnet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.e2e.controlplane.fixture import TOOLS_BIN, RealAPI
from tests.e2e.kind import kind_env
from tests.e2e.local.operator_env import Env
from tests.e2e.node.cluster import Node

# The tags the scenarios name (the default image, the roll's target, the audit image derived from the default),
# as the kind tier loads them; Kubernetes reads a bare name as docker.io/library/<name>.
# OZONE_SCM_NODE_IMAGE: another local tag of `make image`'s image, for two node tiers sharing one podman store
SCM_IMAGE = os.environ.get("OZONE_SCM_NODE_IMAGE", "localhost/ozone-scm:dev")
# OZONE_SCM_NODE_AUDIT_IMAGE: likewise for `make audit-image AUDIT_IMAGE_TAG=...`
AUDIT_IMAGE = os.environ.get("OZONE_SCM_NODE_AUDIT_IMAGE", "localhost/ozone-scm-audit:dev")
TAGS = {SCM_IMAGE: ("ozone-scm:dev", "ozone-scm:0.1.0", "ozone-scm:0.2.0"), AUDIT_IMAGE: ("ozone-scm-audit:0.1.0",)}


class NodeCluster:
    """``kind_env.KindCluster`` over ``cluster.Node``."""

    engine = "none"  # nothing to exec into: the node's processes are this machine's

    def __init__(self, node: Node) -> None:
        assert node.cp is not None
        self.node = node
        self.url = node.cp.url
        self.ca_crt = node.cp.ca_crt
        self.admin_token = node.cp.admin_token
        self.admin_kubeconfig = node.cp.admin_kubeconfig
        self.workdir = node.workdir
        self.volumes = node.workdir / "workload-volumes"
        self.volumes.mkdir(exist_ok=True)

    def admin(self) -> RealAPI:
        return self.node.admin()

    def check_alive(self) -> None:
        self.node.check_alive()

    def kubectl(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run([str(TOOLS_BIN / "kubectl"), "--kubeconfig", str(self.admin_kubeconfig), *args],
                                capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout


class Nodes(kind_env.KindNodes):
    """The kubelet fixture's test-facing calls on the real node."""

    cluster: NodeCluster

    async def kill(self, namespace: str, name: str, container: str | None = None,
                   sig: int = signal.SIGKILL) -> None:
        _, ids = self._container(namespace, name, container)
        tasks = self.cluster.node.ctr("tasks", "ls").splitlines()[1:]
        for cid in ids:
            pids = [int(f[1]) for f in (line.split() for line in tasks) if f and f[0] == cid]
            assert pids, f"container {cid} of {namespace}/{name} has no task in containerd"
            os.kill(pids[0], sig)

    def pvc_dir(self, pvc: dict[str, Any]) -> Path:
        meta = pvc["metadata"]
        live = self.api.get_object("v1", "PersistentVolumeClaim", meta["name"], meta["namespace"]) or pvc
        volume = (live.get("spec") or {}).get("volumeName")
        if not volume:
            raise AssertionError(f"PVC {meta['namespace']}/{meta['name']} is not bound")
        pv = self.api.get_object("v1", "PersistentVolume", volume) or {}
        local = ((pv.get("spec") or {}).get("local") or {}).get("path")
        if not local:
            raise AssertionError(f"PV {volume} is not a local volume of the node: {pv.get('spec')}")
        return Path(local)


@contextlib.asynccontextmanager
async def node_environment(node: Node, workdir: Path, *, namespace: str = "ozone", runtime: str = "process",
                           restricted: bool = True, operator: str = "pod") -> AsyncIterator[Env]:
    """Like ``operator_env.environment``: the kind tier's environment on this node, the operator as the chart's
    Deployment Pod (``operator="pod"``) or as a host process (``"process"``)."""
    cluster = NodeCluster(node)
    node.top_up_volumes(node.admin())
    async with kind_env.kind_environment(cluster, workdir, namespace=namespace, runtime=runtime,
                                         restricted=restricted, nodes=Nodes, node_volumes=str(cluster.volumes),
                                         operator=operator) as env:
        yield env

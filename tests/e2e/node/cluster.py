"""A real single-node Kubernetes cluster for the node tier (``make e2e-node``), built by ``make k8s-node``.

Everything runs inside namespaces and cgroups this module creates, and ``stop()`` (or ``down(workdir)`` from
another process, after a crash) removes them:

- **a network namespace** ``ozsn-<pid>`` joined to the host by one veth pair on ``LINK`` (the host's end
  ``HOST_IP``, the node's ``NODE_IP``): the only addresses outside the namespace, used by the test process to reach
  the API server. Pods get addresses from ``POD_SUBNET`` on the bridge ``cni0`` (Debian's CNI ``bridge`` and
  ``host-local`` plugins), Services from ``SERVICE_CIDR``; kube-proxy's iptables rules live in the namespace;
- **a mount namespace** (a holder process, ``unshare --mount --propagation slave``) shared by containerd, kubelet and
  kube-proxy, so kubelet's volume mounts are the ones runc binds into containers; ``/run/containerd`` and
  ``/run/netns`` are tmpfs there, and every mount the node makes goes away with the namespace;
- **a cgroup** ``/ozone-scm-node-<pid>`` in every hierarchy: kubelet's ``cgroupRoot`` (its QoS and Pod cgroups sit
  below it) and, under ``daemons``, every process the tier starts, containerd's shims included. Stopping kills what
  is left in that tree, by PID, and removes the cgroups.

Inside: etcd, kube-apiserver and kube-controller-manager (``tests/e2e/controlplane/fixture.py``, on ``NODE_IP``),
kube-scheduler, kubelet and kube-proxy from the same ``k8s.io/kubernetes`` build, Debian's containerd 1.6 with runc,
the project's pause image (``tools/k8s-node/pause``) and CoreDNS (``tools/k8s-node/coredns``) built into scratch
images with podman and imported with ``ctr -n k8s.io images import`` (nothing is pulled), CoreDNS as the cluster
DNS (a Deployment and the ``kube-dns`` Service), and a StorageClass with ``allowVolumeExpansion`` over static local
PersistentVolumes in the work dir. Every wait is on a condition with a deadline.

``python -m tests.e2e.node.cluster up WORKDIR`` runs it in the foreground (``scripts/k8s_node.sh``);
``... down WORKDIR`` removes what an earlier ``up`` left.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.controlplane.fixture import (
    ControlPlane,
    ControlPlaneError,
    Placement,
    Proc,
    RealAPI,
    _die_with_parent,
    binary,
    kubeconfig,
    wait_until,
)

REPO = Path(__file__).resolve().parents[3]
TOOLS_BIN = REPO / ".tools" / "bin"
NODE_NAME = "ozone-scm-node"
# Private ranges used only by this tier, inside its namespace (and the one veth pair on LINK). The second octet
# comes from OZONE_SCM_NODE_OCTET (default 217), so two node tiers can run side by side on one host.
_OCTET = os.environ.get("OZONE_SCM_NODE_OCTET", "217")
if not (_OCTET.isdigit() and 16 <= int(_OCTET) <= 250):
    raise ValueError(f"OZONE_SCM_NODE_OCTET={_OCTET!r} is not a number from 16 to 250: unset it or pick a free one")
LINK = f"10.{_OCTET}.254.0/30"
HOST_IP = f"10.{_OCTET}.254.1"
NODE_IP = f"10.{_OCTET}.254.2"
CLUSTER_CIDR = f"10.{_OCTET}.0.0/17"
POD_SUBNET = f"10.{_OCTET}.0.0/24"
SERVICE_CIDR = f"10.{_OCTET}.128.0/20"
DNS_IP = f"10.{_OCTET}.128.10"
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/ozone-scm-pause:1.0"
COREDNS_IMAGE = "localhost/ozone-scm-coredns:dev"
STORAGE_CLASS = "ozone-scm-local"
CNI_BIN = Path("/usr/lib/cni")
CONTAINERD_SOCK = "/run/containerd/containerd.sock"  # inside the node's mount namespace (a tmpfs there)
STATE = "node.json"
VOLUMES = 8


class NodeError(RuntimeError):
    pass


def _run(argv: list[str], what: str, timeout: float = 120, **kw: Any) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if result.returncode != 0:
        raise NodeError(f"{what} failed ({result.returncode}): {' '.join(argv)}\n{result.stdout}{result.stderr}")
    return result.stdout


def preflight() -> None:
    """One line naming what is missing and how to get it."""
    if os.geteuid() != 0:
        raise NodeError("the node tier needs root (network namespaces, cgroups, mounts): run it as root")
    for name in ("kubelet", "kube-scheduler", "kube-proxy", "coredns", "ozone-scm-pause"):
        if not os.access(TOOLS_BIN / name, os.X_OK):
            raise NodeError(f"{TOOLS_BIN / name} is missing: run `make k8s-node`")
    for tool in ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "podman", "nsenter", "unshare", "ip",
                 "iptables"):
        if shutil.which(tool) is None:
            raise NodeError(f"{tool} is not on PATH: run `make k8s-node` (scripts/install_k8s_node_runtime.sh)")
    for plugin in ("bridge", "host-local", "loopback", "portmap"):
        if not os.access(CNI_BIN / plugin, os.X_OK):
            raise NodeError(f"CNI plugin {CNI_BIN / plugin} is missing: run `make k8s-node`")
    routes = _run(["ip", "-4", "route", "show", LINK], "ip route")
    if routes.strip():
        raise NodeError(f"{LINK} is already routed on this host ({routes.strip()}): another node tier is running; "
                        "stop it with `scripts/k8s_node.sh down <its work dir>`")


def cgroup_mounts() -> list[Path]:
    """The mount point of every cgroup hierarchy (v1 controllers, named hierarchies, the v2 tree)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] in ("cgroup", "cgroup2"):
            found.append(Path(parts[1]))
    if not found:
        raise NodeError("no cgroup hierarchy is mounted under /sys/fs/cgroup: kubelet cannot run here")
    return found


def tracking_hierarchy(mounts: list[Path]) -> Path:
    """The hierarchy in which every process of the tier is found: v1 ``pids`` (runc puts every container there), or
    the v2 tree."""
    for m in mounts:
        if m.name == "pids":
            return m
    for m in mounts:
        if (m / "cgroup.controllers").exists():
            return m
    raise NodeError(f"neither a v1 pids hierarchy nor cgroup v2 among {mounts}")


def _pids_under(root: Path) -> list[int]:
    pids: list[int] = []
    if not root.is_dir():
        return pids
    for procs in root.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in procs.read_text().split()]
    return pids


def kill_cgroup_tree(root: Path, timeout: float = 30) -> None:
    """SIGKILL every process under ``root`` until none is left (each by PID; new children of dying shims too)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _pids_under(root)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise NodeError(f"processes {pids} under {root} survived SIGKILL for {timeout:.0f}s")
        time.sleep(0.1)


def remove_cgroups(mounts: list[Path], name: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    for m in mounts:
        top = m / name
        while top.is_dir():
            dirs = sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True)
            for d in [*dirs, top]:
                with contextlib.suppress(OSError):
                    d.rmdir()
            if top.is_dir() and time.monotonic() > deadline:
                raise NodeError(f"cgroup {top} could not be removed within {timeout:.0f}s")
            if top.is_dir():
                time.sleep(0.1)


def down(workdir: Path) -> None:
    """Remove what ``Node.start`` made, from its state file: every process in the tier's cgroup tree (by PID), the
    cgroups, the network namespace (its veth pair goes with it). Safe to run twice."""
    state_file = workdir / STATE
    if not state_file.exists():
        return
    state = json.loads(state_file.read_text())
    mounts = [Path(m) for m in state["cgroup_mounts"]]
    kill_cgroup_tree(Path(state["tracking"]) / state["cgroup"])
    remove_cgroups(mounts, state["cgroup"])
    if Path(f"/run/netns/{state['netns']}").exists():
        _run(["ip", "netns", "delete", state["netns"]], "ip netns delete")
    state_file.unlink()


class Node:
    """The cluster. ``with Node(workdir) as node:``; ``node.cp`` is the control plane, ``node.admin()`` a client."""

    def __init__(self, workdir: Path, *, startup_timeout: float = 240) -> None:
        self.workdir = workdir.resolve()
        self.startup_timeout = startup_timeout
        tag = f"{os.getpid()}"
        self.netns = f"ozsn-{tag}"
        self.host_veth = f"ozsn{tag}h"[:15]
        self.cgroup = f"ozone-scm-node-{tag}"
        self.mounts: list[Path] = []
        self.tracking = Path()
        self.holder: subprocess.Popen[bytes] | None = None
        self.procs: list[Proc] = []
        self.cp: ControlPlane | None = None
        self.timings: dict[str, float] = {}
        self.kubelet_token = secrets.token_urlsafe(32)
        self.proxy_token = secrets.token_urlsafe(32)
        self.volume_serial = 0

    def __enter__(self) -> Node:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- helpers ---------------------------------------------------------------------------------------------
    @property
    def wrap(self) -> tuple[str, ...]:
        assert self.holder is not None
        return ("nsenter", "-t", str(self.holder.pid), "-m", "-n", "--")

    def _join(self) -> None:
        """In each child before exec: into the tier's cgroup (its children, shims included, stay there)."""
        (self.tracking / self.cgroup / "daemons" / "cgroup.procs").write_text(str(os.getpid()))

    def _preexec(self) -> None:
        _die_with_parent()
        self._join()

    def in_node(self, *argv: str, what: str = "", timeout: float = 120) -> str:
        """Run a command in the node's network and mount namespaces; its output."""
        return _run([*self.wrap, *argv], what or argv[0], timeout=timeout)

    def ctr(self, *args: str, timeout: float = 300) -> str:
        return self.in_node("ctr", "--address", CONTAINERD_SOCK, "-n", "k8s.io", *args, what="ctr", timeout=timeout)

    def _spawn(self, name: str, argv: list[str]) -> Proc:
        log = self.workdir / f"{name}.log"
        out = open(log, "wb")  # noqa: SIM115 - handed to the child
        try:
            popen = subprocess.Popen([*self.wrap, *argv], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True,
                                     preexec_fn=self._preexec)
        finally:
            out.close()
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def proc(self, name: str) -> Proc:
        for p in self.procs:
            if p.name == name:
                return p
        raise KeyError(name)

    def admin(self) -> RealAPI:
        assert self.cp is not None
        return self.cp.admin()

    def check_alive(self) -> None:
        for p in self.procs:
            p.check_alive()
        if self.cp is not None:
            self.cp.check_alive()

    def _mark(self, what: str, t0: float) -> None:
        self.timings[what] = round(time.monotonic() - t0, 1)

    # ---- start -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        t0 = time.monotonic()
        preflight()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.mounts = cgroup_mounts()
        self.tracking = tracking_hierarchy(self.mounts)
        (self.workdir / STATE).write_text(json.dumps({
            "netns": self.netns, "cgroup": self.cgroup, "cgroup_mounts": [str(m) for m in self.mounts],
            "tracking": str(self.tracking)}))
        self._cgroups()
        self._network()
        self._holder()
        self._containerd()
        self._mark("namespaces, cgroups, containerd", t0)
        self.import_archive(self._scratch_image("pause", TOOLS_BIN / "ozone-scm-pause", PAUSE_IMAGE,
                                                user="65535:65535"))
        self.import_archive(self._scratch_image("coredns", TOOLS_BIN / "coredns", COREDNS_IMAGE, user="65532:65532"))
        self._mark("pause and CoreDNS images imported", t0)
        self._cni()
        placement = Placement(
            address=NODE_IP, service_cidr=SERVICE_CIDR, controllers=("*",), wrap=self.wrap, join=self._join,
            extra_tokens=((self.kubelet_token, f"system:node:{NODE_NAME}", "system:nodes"),
                          (self.proxy_token, "system:kube-proxy", "system:node-proxier")),
            kubelet_client=True, endpoint_reconciler="lease", kubelet_address_types="InternalIP")
        self.cp = ControlPlane(self.workdir / "control-plane", startup_timeout=self.startup_timeout,
                               placement=placement)
        self.cp.start()
        self._mark("control plane", t0)
        self._scheduler()
        self._kubelet()
        self._kube_proxy()
        admin = self.admin()
        wait_until(lambda: self.node_ready(admin), self.startup_timeout, f"Node {NODE_NAME} Ready", poll=0.5,
                   alive=self.check_alive)
        self._mark("node Ready", t0)
        self._storage(admin)
        self._coredns(admin)
        self._mark("CoreDNS ready", t0)

    def _cgroups(self) -> None:
        for m in self.mounts:
            top = m / self.cgroup
            top.mkdir(exist_ok=True)
            if m.name == "cpuset":  # a new cpuset has no CPUs or memory nodes until given its parent's
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (top / f).write_text((m / f).read_text())
        (self.tracking / self.cgroup / "daemons").mkdir(exist_ok=True)

    def _network(self) -> None:
        _run(["ip", "netns", "add", self.netns], "ip netns add")
        steps = [
            ["ip", "link", "add", self.host_veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns],
            ["ip", "addr", "add", f"{HOST_IP}/30", "dev", self.host_veth],
            ["ip", "link", "set", self.host_veth, "up"],
            ["ip", "-n", self.netns, "addr", "add", f"{NODE_IP}/30", "dev", "eth0"],
            ["ip", "-n", self.netns, "link", "set", "eth0", "up"],
            ["ip", "-n", self.netns, "link", "set", "lo", "up"],
            # the node's default route: kubelet and kube-proxy take the node's address from it
            ["ip", "-n", self.netns, "route", "add", "default", "via", HOST_IP],
            # the test process (the operator, the scenarios' checks) reaches Pods by their IP, as in the other
            # tiers; the route goes with the veth pair when the namespace is deleted
            ["ip", "route", "add", POD_SUBNET, "via", NODE_IP, "dev", self.host_veth],
        ]
        for argv in steps:
            _run(argv, "network set-up")
        sysctls = {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"}
        for key, value in sysctls.items():
            if Path("/proc/sys", *key.split(".")).exists():
                _run(["ip", "netns", "exec", self.netns, "sysctl", "-qw", f"{key}={value}"], f"sysctl {key}")

    def _holder(self) -> None:
        ready = self.workdir / "holder.ready"
        ready.unlink(missing_ok=True)
        script = ("set -e; for d in /run/containerd /run/netns; do mkdir -p $d; mount -t tmpfs -o mode=0755 tmpfs $d;"
                  f" done; touch {ready}; exec sleep infinity")
        self.holder = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.netns}", "unshare", "--mount", "--propagation", "slave",
             "sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / "holder.log", "wb"),  # noqa: SIM115 - handed to the child
            start_new_session=True, preexec_fn=self._preexec)

        def alive() -> None:
            if self.holder is not None and self.holder.poll() is not None:
                raise NodeError(f"the namespace holder exited: {(self.workdir / 'holder.log').read_text()}")

        wait_until(ready.exists, 30, "the node's mount namespace", alive=alive)

    def _containerd(self) -> None:
        root = self.workdir / "containerd"
        root.mkdir(exist_ok=True)
        cni = self.workdir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        config = f"""version = 2
root = "{root}/store"
state = "/run/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{CONTAINERD_SOCK}"
[ttrpc]
  address = "{CONTAINERD_SOCK}.ttrpc"
[debug]
  address = "/run/containerd/debug.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # root here lacks CAP_SYS_RESOURCE: no OOM score below containerd's own (the sandbox's -998 would fail runc)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni / 'net.d'}"
"""
        (root / "config.toml").write_text(config)
        proc = self._spawn("containerd", ["containerd", "--config", str(root / "config.toml")])

        def serving() -> bool:
            return subprocess.run([*self.wrap, "ctr", "--address", CONTAINERD_SOCK, "version"],
                                  capture_output=True, timeout=10).returncode == 0

        wait_until(serving, 60, "containerd serving", poll=0.3, alive=proc.check_alive)

    def _scratch_image(self, name: str, binary_path: Path, ref: str, *, user: str) -> Path:
        """A scratch image holding one static binary, built with podman; the path of its archive."""
        ctx = self.workdir / "images" / name
        ctx.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binary_path, ctx / name)
        (ctx / "Containerfile").write_text(
            f'FROM scratch\nCOPY {name} /{name}\nUSER {user}\nENTRYPOINT ["/{name}"]\n')
        _run(["podman", "--runtime", "runc", "build", "-q", "-t", ref, "-f", str(ctx / "Containerfile"), str(ctx)],
             f"podman build {ref}", timeout=300)
        archive = self.workdir / "images" / f"{name}.tar"
        archive.unlink(missing_ok=True)
        _run(["podman", "save", "-q", "-o", str(archive), ref], f"podman save {ref}", timeout=300)
        return archive

    def import_archive(self, archive: Path) -> None:
        self.ctr("images", "import", str(archive))

    def import_podman_image(self, ref: str, *, also_as: Sequence[str] = ()) -> None:
        """Load an image podman has (``make image``: ``localhost/ozone-scm:dev``) into the node's containerd; a Pod
        names it ``ref`` or one of ``also_as`` (e.g. ``docker.io/library/ozone-scm:dev``, which is how Kubernetes
        reads ``ozone-scm:dev``)."""
        archive = self.workdir / "images" / (ref.replace("/", "_").replace(":", "_") + ".tar")
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.unlink(missing_ok=True)
        _run(["podman", "save", "-q", "-o", str(archive), ref], f"podman save {ref}", timeout=600)
        self.import_archive(archive)
        for name in also_as:
            with contextlib.suppress(NodeError):  # absent on a first import
                self.ctr("images", "rm", name)
            self.ctr("images", "tag", ref, name)
        archive.unlink()

    def _cni(self) -> None:
        conf = {
            "cniVersion": "0.4.0", "name": "ozone-scm-node",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.workdir / "cni" / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (self.workdir / "cni" / "net.d" / "10-ozone-scm-node.conflist").write_text(json.dumps(conf, indent=1))

    def _kubeconfig(self, name: str, token: str) -> Path:
        assert self.cp is not None
        return kubeconfig(self.workdir / f"{name}.kubeconfig", self.cp.url, self.cp.ca_crt, token)

    def _scheduler(self) -> None:
        assert self.cp is not None
        admin = str(self.cp.admin_kubeconfig)
        self._spawn("kube-scheduler", [
            str(binary("kube-scheduler")), "--kubeconfig", admin, "--authentication-kubeconfig", admin,
            "--authorization-kubeconfig", admin, "--bind-address", "127.0.0.1", "--secure-port", "10259",
            "--leader-elect=false", "--v", "1"])

    def _kubelet(self) -> None:
        assert self.cp is not None
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # cgroup v1 here (kubelet 1.35 refuses it unless told); no swap accounting
            "failCgroupV1": False, "failSwapOn": False,
            "cgroupDriver": "cgroupfs", "cgroupsPerQOS": True, "cgroupRoot": f"/{self.cgroup}",
            "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCK}",
            "address": NODE_IP, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.cp.ca_crt)}},
            "authorization": {"mode": "AlwaysAllow"},  # only clients with a certificate of the tier's CA get in
            "clusterDNS": [DNS_IP], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": "",
            "podLogsDir": str(self.workdir / "pod-logs"), "staticPodPath": "",
            "serializeImagePulls": False, "maxPods": 60,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
            "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
            "nodeStatusUpdateFrequency": "5s", "syncFrequency": "10s",
        }
        path = self.workdir / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("kubelet", [
            str(binary("kubelet")), "--config", str(path), "--kubeconfig",
            str(self._kubeconfig("kubelet", self.kubelet_token)), "--root-dir", str(self.workdir / "kubelet"),
            "--hostname-override", NODE_NAME, "--node-ip", NODE_IP, "--v", "1"])

    def _kube_proxy(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "iptables", "clusterCIDR": CLUSTER_CIDR, "hostnameOverride": NODE_NAME,
            "bindAddress": NODE_IP, "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            "clientConnection": {"kubeconfig": str(self._kubeconfig("kube-proxy", self.proxy_token))},
            "conntrack": {"maxPerCore": 0},  # leave the kernel's conntrack table size alone
        }
        path = self.workdir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("kube-proxy", [str(binary("kube-proxy")), "--config", str(path), "--v", "1"])

    @staticmethod
    def node_ready(admin: RealAPI) -> bool:
        node = admin.get_object("v1", "Node", NODE_NAME)
        conds = {c["type"]: c["status"] for c in ((node or {}).get("status") or {}).get("conditions") or ()}
        return conds.get("Ready") == "True"

    def _storage(self, admin: RealAPI) -> None:
        admin.request("POST", "/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True, "reclaimPolicy": "Retain"})
        self.top_up_volumes(admin)

    def top_up_volumes(self, admin: RealAPI, available: int = VOLUMES) -> None:
        """Static volumes are not provisioned: replace every Released one (its claim deleted; ``Retain``) by a new,
        empty one, and add more until ``available`` are Available."""
        pvs = [pv for pv in admin.list_objects("v1", "PersistentVolume")
               if pv["spec"].get("storageClassName") == STORAGE_CLASS]
        free = 0
        for pv in pvs:
            phase = (pv.get("status") or {}).get("phase")
            if phase == "Released":
                admin.call_delete("v1", "PersistentVolume", pv["metadata"]["name"])
                shutil.rmtree(pv["spec"]["local"]["path"], ignore_errors=True)
            elif phase in ("Available", "Pending", None):
                free += 1
        for _ in range(available - free):
            self.volume_serial += 1
            self.add_volume(admin, f"{STORAGE_CLASS}-{self.volume_serial}")

    def add_volume(self, admin: RealAPI, name: str, size: str = "20Gi") -> None:
        """A static local PersistentVolume on this node (a directory of the work dir)."""
        path = self.workdir / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        admin.put_object({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": STORAGE_CLASS,
                     "local": {"path": str(path)},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}]}]}}}})

    def _coredns(self, admin: RealAPI) -> None:
        for doc in coredns_manifests():
            api = doc["apiVersion"]
            base = "/api/v1" if api == "v1" else f"/apis/{api}"
            plural = {"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
                      "ClusterRoleBinding": "clusterrolebindings", "ConfigMap": "configmaps",
                      "Deployment": "deployments", "Service": "services"}[doc["kind"]]
            ns = doc["metadata"].get("namespace")
            admin.request("POST", f"{base}{f'/namespaces/{ns}' if ns else ''}/{plural}", doc)

        def available() -> bool:
            dep = admin.request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/coredns")
            return bool((dep.get("status") or {}).get("availableReplicas"))

        wait_until(available, self.startup_timeout, "CoreDNS Deployment available", poll=0.5, alive=self.check_alive)

    # ---- stop ------------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """kube-proxy, kubelet, the scheduler, the control plane and containerd by PID (SIGTERM, then SIGKILL), then
        every process left in the tier's cgroup tree (shims, containers, the holder): the mount namespace goes with
        the holder. Then the cgroups and the network namespace."""
        errors: list[str] = []
        for p in reversed([p for p in self.procs if p.name != "containerd"]):
            p.stop()
        if self.cp is not None:
            self.cp.stop()
        for p in self.procs:
            p.stop()
        self.procs.clear()
        try:
            down(self.workdir)
        except NodeError as exc:
            errors.append(str(exc))
        if self.holder is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.holder.wait(10)
        shutil.rmtree(self.workdir / "containerd" / "store", ignore_errors=True)
        if errors:
            raise NodeError("; ".join(errors))


# ---- CoreDNS as the cluster DNS -----------------------------------------------------------------------------------
COREFILE = f""".:1053 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loadbalance
}}
"""


def coredns_manifests() -> list[dict[str, Any]]:
    """CoreDNS in kube-system: its ServiceAccount and read-only RBAC, the Corefile, a Deployment that passes Pod
    Security ``restricted`` (non-root, port 1053, no capabilities) and the ``kube-dns`` Service on ``DNS_IP``."""
    labels = {"k8s-app": "kube-dns"}
    restricted_container = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"serviceAccountName": "coredns", "dnsPolicy": "Default",
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                          "seccompProfile": {"type": "RuntimeDefault"}},
                      "containers": [{
                          "name": "coredns", "image": COREDNS_IMAGE, "imagePullPolicy": "Never",
                          "args": ["-conf", "/etc/coredns/Corefile"],
                          "ports": [{"name": "dns", "containerPort": 1053, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 1053, "protocol": "TCP"}],
                          "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                          "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
                          "securityContext": restricted_container,
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}]}],
                      "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
         "spec": {"selector": labels, "clusterIP": DNS_IP, "ports": [
             {"name": "dns", "port": 53, "targetPort": 1053, "protocol": "UDP"},
             {"name": "dns-tcp", "port": 53, "targetPort": 1053, "protocol": "TCP"}]}},
    ]


# ---- command line (scripts/k8s_node.sh) ---------------------------------------------------------------------------
def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="k8s_node", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down"))
    parser.add_argument("workdir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "down":
        down(args.workdir)
        return 0
    signal.signal(signal.SIGTERM, _interrupt)  # stop() runs on SIGTERM as on Ctrl-C, also while starting
    try:
        with Node(args.workdir) as node:
            assert node.cp is not None
            print(f"k8s_node: up (seconds since start: {node.timings}); KUBECONFIG={node.cp.admin_kubeconfig} "
                  f"(API server {node.cp.url}); Ctrl-C or SIGTERM stops it", flush=True)
            while True:
                signal.pause()
    except KeyboardInterrupt:
        print("k8s_node: stopped; every process, mount, namespace and cgroup it made is gone", flush=True)
    except (NodeError, ControlPlaneError) as exc:
        print(f"k8s_node: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

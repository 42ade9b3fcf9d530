"""Pod networks for the local kubelet fixture: one address per Pod, reachable from the test process.

Called by ``kubelet.py``. Each class creates only what it owns and removes it in ``teardown`` (also after a crash
of an earlier run: ``sweep_stale`` removes namespaces and links whose owning process is gone). Nothing here sends
traffic; the addresses come from 198.18.0.0/15 (RFC 2544's benchmarking range), which exists on this machine only
inside the namespaces and podman networks the fixture creates, and pods get no default route, so nothing a Pod
sends can leave those namespaces.

- ``NetnsNetwork`` (default, needs root and iproute2): a bridge in its own network namespace; every Pod gets its
  own network namespace with a veth into the bridge and an address from a /24 picked for this run; the test
  process's namespace gets one veth into the bridge (``<prefix>h``, address ``.1``), so the operator, kubectl-like
  clients and probes reach Pods directly, as on a real cluster network. Pods can bind the default ports (9860,
  9861, 9894, ...) like real Pods.
- ``LoopbackNetwork``: each Pod gets a distinct 127.x.y.z address and no namespace (no root needed); Pods share the
  host's ports, so their processes must bind their own address rather than 0.0.0.0.
- ``PodmanNetwork``: a podman bridge network with a subnet picked for this run; containers get ``--ip`` addresses
  from it (used by ``PodmanRuntime``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

LOCK_DIR = Path("/tmp/ozone-scm-k8s-locks")
SUPERNET = ipaddress.IPv4Network("198.18.0.0/15")


def _subnet(index: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network((int(SUPERNET.network_address) + (index << 8), 24))


class NetworkError(RuntimeError):
    pass


async def run(*argv: str, check: bool = True, timeout: float = 30) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise NetworkError(f"{' '.join(argv)} timed out after {timeout}s") from None
    text = out.decode(errors="replace")
    if check and proc.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed ({proc.returncode}): {text.strip()}")
    return int(proc.returncode or 0), text


@dataclass
class PodAddress:
    ip: str
    netns: str | None = None  # the network namespace the Pod's processes join (NetnsNetwork)


class _SubnetLease:
    """A /24 of 198.18.0.0/15 held for this process (an flock'd file per subnet; released on close or exit)."""

    def __init__(self, index: int, handle: int) -> None:
        self.index = index
        self._handle = handle
        self.network: ipaddress.IPv4Network = _subnet(index)

    @classmethod
    def acquire(cls, used: set[str]) -> _SubnetLease:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        for index in range(1, 512):
            net = _subnet(index)
            if any(ipaddress.ip_address(a) in net for a in used):
                continue
            fd = os.open(LOCK_DIR / f"subnet-{index}", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            return cls(index, fd)
        raise NetworkError("no free /24 left in 198.18.0.0/15 for a pod network")

    def host(self, n: int) -> str:
        return str(self.network.network_address + n)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            os.close(self._handle)


async def _addresses_in_use() -> set[str]:
    _, out = await run("ip", "-o", "-4", "addr", "show", check=False)
    return set(re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out))


class NetnsNetwork:
    """Network namespaces on a private bridge (see module docstring)."""

    kind = "netns"

    def __init__(self) -> None:
        self._lease: _SubnetLease | None = None
        self.prefix = ""
        self._next = 2
        self._pods: dict[str, str] = {}  # netns name -> ip

    @property
    def host_ip(self) -> str:
        assert self._lease is not None
        return self._lease.host(1)

    @property
    def bridge_ns(self) -> str:
        return f"{self.prefix}-br"

    async def setup(self) -> None:
        if os.geteuid() != 0 or not shutil.which("ip"):
            raise NetworkError("NetnsNetwork needs root and iproute2 (scripts/install_container_tools.sh); "
                               "use LoopbackNetwork otherwise")
        await sweep_stale()
        self._lease = _SubnetLease.acquire(await _addresses_in_use())
        self.prefix = f"ozk{self._lease.index:03x}"
        # The owner's pid in a file beside the subnet locks, so a later run can tell a crashed run's leftovers.
        try:
            (LOCK_DIR / f"{self.prefix}.owner").write_text(str(os.getpid()))
            await run("ip", "netns", "add", self.bridge_ns)
            await run("ip", "-n", self.bridge_ns, "link", "set", "lo", "up")
            await run("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
            await run("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
            await run("ip", "link", "add", f"{self.prefix}h", "type", "veth", "peer", "name", "hostside",
                      "netns", self.bridge_ns)
            await run("ip", "-n", self.bridge_ns, "link", "set", "hostside", "master", "br0", "up")
            await run("ip", "addr", "add", f"{self.host_ip}/24", "dev", f"{self.prefix}h")
            await run("ip", "link", "set", f"{self.prefix}h", "up")
        except BaseException:
            await self.teardown()
            raise

    async def add_pod(self, key: str) -> PodAddress:
        assert self._lease is not None
        if self._next > 254:
            raise NetworkError("pod network full (253 pods)")
        n = self._next
        self._next += 1
        ns = f"{self.prefix}-p{n}"
        ip = self._lease.host(n)
        try:
            await run("ip", "netns", "add", ns)
            await run("ip", "link", "add", f"{self.prefix}p{n}", "netns", self.bridge_ns, "type", "veth", "peer",
                      "name", "eth0", "netns", ns)
            await run("ip", "-n", self.bridge_ns, "link", "set", f"{self.prefix}p{n}", "master", "br0", "up")
            await run("ip", "-n", ns, "link", "set", "lo", "up")
            await run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            await run("ip", "-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            await run("ip", "netns", "del", ns, check=False)
            raise
        self._pods[ns] = ip
        return PodAddress(ip, ns)

    async def remove_pod(self, addr: PodAddress) -> None:
        if addr.netns and addr.netns in self._pods:
            del self._pods[addr.netns]
            await run("ip", "netns", "del", addr.netns, check=False)

    async def teardown(self) -> None:
        for ns in list(self._pods):
            await run("ip", "netns", "del", ns, check=False)
        self._pods.clear()
        if self.prefix:
            await run("ip", "link", "del", f"{self.prefix}h", check=False)
            await run("ip", "netns", "del", self.bridge_ns, check=False)
            with contextlib.suppress(FileNotFoundError):
                (LOCK_DIR / f"{self.prefix}.owner").unlink()
        if self._lease is not None:
            self._lease.release()
            self._lease = None


class LoopbackNetwork:
    """A distinct 127.x.y.z per Pod; no namespaces (see module docstring)."""

    kind = "loopback"
    host_ip = "127.77.0.1"  # also where the fixture's cluster DNS listens

    def __init__(self, base: str = "127.77.0.0") -> None:
        self._base = ipaddress.ip_address(base)
        self._next = 2

    async def setup(self) -> None:
        return None

    async def add_pod(self, key: str) -> PodAddress:
        ip = str(self._base + self._next)
        self._next += 1
        return PodAddress(ip, None)

    async def remove_pod(self, addr: PodAddress) -> None:
        return None

    async def teardown(self) -> None:
        return None


class PodmanNetwork:
    """A podman bridge network on a /24 of 198.18.0.0/15 leased for this run (see module docstring)."""

    kind = "podman"

    def __init__(self, podman: str = "podman") -> None:
        self.podman = podman
        self.name = ""
        self._lease: _SubnetLease | None = None
        self._next = 2

    @property
    def host_ip(self) -> str:
        assert self._lease is not None
        return self._lease.host(1)

    async def setup(self) -> None:
        await sweep_stale(self.podman)
        self._lease = _SubnetLease.acquire(await _addresses_in_use())
        self.name = f"ozk-{os.getpid()}-{self._lease.index}"
        # --disable-dns: the kubelet fixture serves cluster DNS on the gateway address itself.
        await run(self.podman, "network", "create", "--disable-dns", "--subnet", str(self._lease.network), "--gateway",
                  self.host_ip, "--label", f"ozone-scm-k8s.owner={os.getpid()}", self.name)

    async def add_pod(self, key: str) -> PodAddress:
        assert self._lease is not None
        ip = self._lease.host(self._next)
        self._next += 1
        return PodAddress(ip, None)

    async def remove_pod(self, addr: PodAddress) -> None:
        return None

    async def teardown(self) -> None:
        if self.name:
            await run(self.podman, "network", "rm", "-f", self.name, check=False, timeout=60)
        if self._lease is not None:
            self._lease.release()
            self._lease = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def sweep_stale(podman: str | None = None) -> None:
    """Remove namespaces, links and podman networks/containers left by fixture runs whose process is gone."""
    run_dir = Path("/run/netns")
    if LOCK_DIR.is_dir() and os.geteuid() == 0:
        for owner in LOCK_DIR.glob("ozk*.owner"):
            try:
                pid = int(owner.read_text().strip() or "0")
            except (OSError, ValueError):
                continue
            if pid and _alive(pid):
                continue
            prefix = owner.name.removesuffix(".owner")
            for ns in run_dir.iterdir() if run_dir.is_dir() else []:
                if ns.name.startswith(f"{prefix}-"):
                    await run("ip", "netns", "del", ns.name, check=False)
            await run("ip", "link", "del", f"{prefix}h", check=False)
            with contextlib.suppress(FileNotFoundError):
                owner.unlink()
    if podman and shutil.which(podman):
        _, out = await run(podman, "ps", "-a", "--filter", "label=ozone-scm-k8s.owner", "--format",
                           "{{.ID}} {{.Labels}}", check=False)
        for line in out.splitlines():
            m = re.match(r"(\S+) .*ozone-scm-k8s\.owner:(\d+)", line)
            if m and not _alive(int(m.group(2))):
                await run(podman, "rm", "-f", "-t", "0", m.group(1), check=False, timeout=60)
        _, out = await run(podman, "network", "ls", "--format", "{{.Name}}", check=False)
        for name in out.split():
            m = re.fullmatch(r"ozk-(\d+)-\d+", name)
            if m and not _alive(int(m.group(1))):
                await run(podman, "network", "rm", "-f", name, check=False, timeout=60)

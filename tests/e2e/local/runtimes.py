"""Container runtimes for the local kubelet fixture: real processes, or podman containers.

Called by ``kubelet.py``, which decides *what* runs (argv, environment, mounts, address, hostname); a runtime only
starts it, waits for it, signals it and runs commands inside it. Everything a runtime starts is tracked by PID or
container name and removed by ``cleanup``; processes also die with the fixture's thread (``PR_SET_PDEATHSIG``).

- ``ProcessRuntime``: the container is a process in the Pod's network namespace (``ip netns exec``), in its own
  mount and UTS namespaces (``unshare --mount --uts``), where the Pod's ``/etc/hosts``, ``/etc/resolv.conf`` and
  volumes are bind-mounted
  at their ``mountPath`` and the hostname is the Pod's. ``bash`` (not ``sh``) sets the mounts up, because dash drops
  environment variables whose names are not shell identifiers (``OZONE-SITE.XML_...``). Mount points that do not
  exist on the host are created (empty) and removed again at cleanup. Needs root.
- ``PodmanRuntime``: ``podman --runtime runc run -d`` of the image on the fixture's podman network with the Pod's
  address, hostname, ``/etc/hosts`` (``--no-hosts`` plus a bind mount, so rewrites reach running containers),
  volumes and environment; ``podman wait``/``kill``/``exec``/``logs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from .podspec import ImageSpec

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


@dataclass
class Launch:
    """Everything needed to start one container of a Pod."""

    name: str  # unique per pod+container+attempt, for logs and podman names
    argv: list[str]
    env: dict[str, str]
    image: str
    hostname: str
    hosts_file: str
    log_path: Path
    ip: str
    resolv_conf: str = ""
    dns: tuple[str, str] = ("", "")  # (nameserver, namespace) for runtimes that generate resolv.conf
    netns: str | None = None
    mounts: list[Mount] = field(default_factory=list)
    workdir: str | None = None
    user: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


class Running(Protocol):
    started_at: float

    async def wait(self) -> int: ...

    async def signal(self, sig: int) -> None: ...

    async def exec(self, argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]: ...

    def alive(self) -> bool: ...


def _exit_code(returncode: int | None) -> int:
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


class ProcessContainer:
    def __init__(self, proc: asyncio.subprocess.Process, launch: Launch, log: Any) -> None:
        self.proc = proc
        self.launch = launch
        self.started_at = time.time()
        self._log = log
        self._code: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.returncode is None

    async def wait(self) -> int:
        code = await self.proc.wait()
        with contextlib.suppress(OSError):
            self._log.close()
        self._code = _exit_code(code)
        return self._code

    async def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    async def exec(self, argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
        if not self.alive():
            return 126, "container is not running"
        nsenter = shutil.which("nsenter") or "nsenter"
        cmd = [nsenter, "--target", str(self.proc.pid), "--mount", "--uts"]
        if self.launch.netns:
            cmd.append("--net")
        proc = await asyncio.create_subprocess_exec(*cmd, "--", *argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return 124, "timed out"
        return _exit_code(proc.returncode), out.decode(errors="replace")


_PROGRAM_PATHS = (Path(__file__).resolve().parents[3], Path(sys.prefix).resolve())


def _hides_the_program(target: str) -> bool:
    """Would a mount at ``target`` hide this checkout or the virtual environment the Pods' programs run from?"""
    t = Path(target).resolve()
    return any(p == t or t in p.parents for p in _PROGRAM_PATHS)


class ProcessRuntime:
    """Containers as processes in per-Pod namespaces (see module docstring)."""

    kind = "process"

    def __init__(self, images: dict[str, ImageSpec]) -> None:
        self.images = images
        self._created_mount_points: list[Path] = []
        self._procs: list[ProcessContainer] = []
        self._tools = {t: shutil.which(t) or t for t in ("ip", "unshare", "bash")}

    def image_spec(self, image: str) -> ImageSpec | None:
        import fnmatch

        if image in self.images:
            return self.images[image]
        for pattern, spec in self.images.items():
            if fnmatch.fnmatchcase(image, pattern):
                return spec
        return None

    async def prepare(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("ProcessRuntime needs root (mount and UTS namespaces, bind mounts)")

    def _mount_point(self, target: str, is_file: bool) -> None:
        path = Path(target)
        if path.exists():
            return
        missing = []
        cur = path
        while not cur.exists():
            missing.append(cur)
            cur = cur.parent
        if is_file:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:
            path.mkdir(parents=True, exist_ok=True)
        self._created_mount_points.extend(missing)

    async def start(self, launch: Launch) -> ProcessContainer:
        lines = ["set -e", f"mount --bind {shlex.quote(launch.hosts_file)} /etc/hosts"]
        if launch.resolv_conf:
            lines.append(f"mount --bind {shlex.quote(launch.resolv_conf)} /etc/resolv.conf")
        # A mount over a directory that holds other mounts' sources (an emptyDir at /tmp, where the Pods' files
        # live under pytest) would hide them: such mounts go last (stable otherwise).
        def hides_a_source(m: Mount) -> bool:
            return any(o is not m and (o.source + "/").startswith(m.target.rstrip("/") + "/") for o in launch.mounts)

        for m in sorted(launch.mounts, key=hides_a_source):
            if _hides_the_program(m.target):
                # The process runtime has no image root: a Pod's program is this checkout's virtual environment.
                # A mount over one of its parents (the restricted Pods' /tmp emptyDir, with the checkout cloned
                # under /tmp) would hide it ("ozone-scm: not found"); the Pod writes to the directory as it is.
                continue
            self._mount_point(m.target, Path(m.source).is_file())
            lines.append(f"mount --bind {shlex.quote(m.source)} {shlex.quote(m.target)}")
            if m.read_only:
                lines.append(f"mount -o remount,bind,ro {shlex.quote(m.target)}")
        lines.append(f"hostname {shlex.quote(launch.hostname)}")
        if launch.workdir:
            lines.append(f"mkdir -p {shlex.quote(launch.workdir)} && cd {shlex.quote(launch.workdir)}")
        lines.append('exec "$@"')
        argv = [self._tools["unshare"], "--mount", "--uts", "--propagation", "private", "--",
                self._tools["bash"], "-c", "\n".join(lines), launch.name, *launch.argv]
        if launch.netns:
            argv = [self._tools["ip"], "netns", "exec", launch.netns, *argv]
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(launch.log_path, "ab")  # noqa: SIM115 - closed when the process ends
        # One header line per run (the argv as JSON, so it never spans lines): kubectl logs --previous splits on it.
        log.write(f"--- {time.strftime('%H:%M:%S')} start {json.dumps(launch.argv)}\n".encode())
        log.flush()
        proc = await asyncio.create_subprocess_exec(*argv, env=launch.env, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=log, stderr=log, start_new_session=True,
                                                    preexec_fn=_die_with_parent)
        container = ProcessContainer(proc, launch, log)
        self._procs.append(container)
        return container

    async def remove(self, container: Running) -> None:
        return None

    async def cleanup(self) -> None:
        for c in self._procs:
            if c.alive():
                await c.signal(signal.SIGKILL)
        for c in self._procs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.proc.wait(), 10)
        self._procs.clear()
        # The mount points it created on this machine (``/dev/termination-log``, ``/audit/...``) stay: removing one
        # detaches the mount over it in every other mount namespace (Linux 3.18+), which can be a Pod of another
        # fixture running at the same time on this machine -- its audit container then wrote its summary to the
        # host's /dev/termination-log and the kubelet reported no termination message. They are empty files and
        # directories, and a later run reuses them.
        self._created_mount_points.clear()


class PodmanContainer:
    def __init__(self, runtime: PodmanRuntime, name: str, launch: Launch) -> None:
        self.runtime = runtime
        self.name = name
        self.launch = launch
        self.started_at = time.time()
        self._exit: int | None = None
        self._logs: asyncio.subprocess.Process | None = None

    def alive(self) -> bool:
        return self._exit is None

    async def wait(self) -> int:
        proc = await asyncio.create_subprocess_exec(self.runtime.podman, "wait", self.name,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        out, _ = await proc.communicate()
        try:
            self._exit = int(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            self._exit = 137
        if self._logs is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._logs.wait(), 10)
        return self._exit

    async def signal(self, sig: int) -> None:
        await self.runtime.podman_cmd("kill", "--signal", str(int(sig)), self.name, check=False)

    async def exec(self, argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
        envs = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
        proc = await asyncio.create_subprocess_exec(self.runtime.podman, "exec", *envs, self.name, *argv,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return 124, "timed out"
        return _exit_code(proc.returncode), out.decode(errors="replace")


class PodmanRuntime:
    """Containers with podman and runc on the fixture's podman network (see module docstring)."""

    kind = "podman"

    def __init__(self, network: str, podman: str = "podman") -> None:
        self.podman = podman
        self.network = network
        self._names: set[str] = set()
        self._image_cache: dict[str, ImageSpec | None] = {}

    async def podman_cmd(self, *args: str, check: bool = True, timeout: float = 120) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(self.podman, *args, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise RuntimeError(f"podman {' '.join(args)} timed out") from None
        text = out.decode(errors="replace")
        if check and proc.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} failed: {text.strip()}")
        return int(proc.returncode or 0), text

    async def prepare(self) -> None:
        if not shutil.which(self.podman):
            raise RuntimeError("podman is not installed (scripts/install_container_tools.sh)")

    async def pull(self, image: str, policy: str, insecure_registries: tuple[str, ...]) -> tuple[str, str] | None:
        """Pull ``image`` from its registry when it is one of ``insecure_registries`` (plain-HTTP registries on
        loopback, as a runtime's ``registries.conf`` marks them), as a container runtime pulls for the kubelet:
        the tag is resolved to the manifest digest the registry holds now (``Docker-Content-Digest``), the image is
        pulled by that digest unless that digest is already stored (``IfNotPresent``; ``Always`` pulls anyway), and
        the container will run ``repository@digest``. Returns ``(run_reference, imageID)``, or ``None`` for an
        image of any other registry (left to ``image_spec_async``: local images only). ``Never`` pulls nothing:
        the digest must be stored already."""
        registry, _, rest = image.partition("/")
        if registry not in insecure_registries or not rest:
            return None
        path, _, digest = rest.partition("@")
        tag = "latest"
        if ":" in path.rsplit("/", 1)[-1]:
            path, tag = path.rsplit(":", 1)
        repository = f"{registry}/{path}"
        if not digest:
            accept = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                                "application/vnd.docker.distribution.manifest.v2+json",
                                "application/vnd.oci.image.index.v1+json",
                                "application/vnd.docker.distribution.manifest.list.v2+json"))
            try:
                async with aiohttp.ClientSession() as session, session.head(
                        f"http://{registry}/v2/{path}/manifests/{tag}", headers={"Accept": accept},
                        timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"{image}: the registry answered {resp.status} for tag {tag!r}")
                    digest = resp.headers.get("Docker-Content-Digest", "")
            except aiohttp.ClientError as exc:
                raise RuntimeError(f"{image}: registry {registry} unreachable: {exc}") from exc
            if not digest.startswith("sha256:"):
                raise RuntimeError(f"{image}: the registry named no digest for tag {tag!r}")
        pinned = f"{repository}@{digest}"
        rc, _ = await self.podman_cmd("image", "exists", pinned, check=False)
        if policy == "Always" or (policy != "Never" and rc != 0):
            await self.podman_cmd("pull", "--quiet", "--tls-verify=false", pinned, timeout=600)
        elif rc != 0:
            raise RuntimeError(f"{image}: imagePullPolicy Never and {pinned} is not stored")
        return pinned, pinned

    async def image_spec_async(self, image: str) -> ImageSpec | None:
        if image not in self._image_cache:
            rc, out = await self.podman_cmd("image", "inspect", image, check=False)
            if rc != 0:
                self._image_cache[image] = None
            else:
                config = json.loads(out)[0].get("Config") or {}
                env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
                self._image_cache[image] = ImageSpec(tuple(config.get("Entrypoint") or ()),
                                                     tuple(config.get("Cmd") or ()), env,
                                                     config.get("WorkingDir") or None)
        return self._image_cache[image]

    async def start(self, launch: Launch) -> PodmanContainer:
        name = launch.name
        await self.podman_cmd("rm", "-f", "-t", "0", name, check=False)
        args = ["--runtime", "runc", "run", "-d", "--name", name, "--network", self.network, "--ip", launch.ip,
                "--hostname", launch.hostname, "--no-hosts", "-v", f"{launch.hosts_file}:/etc/hosts:ro",
                "--dns", launch.dns[0], "--dns-search", f"{launch.dns[1]}.svc.cluster.local",
                "--dns-search", "svc.cluster.local", "--dns-search", "cluster.local", "--dns-option", "ndots:5",
                "--label", f"ozone-scm-k8s.owner={os.getpid()}", "--entrypoint", json.dumps(launch.argv[:1])]
        for k, v in launch.labels.items():
            args += ["--label", f"{k}={v}"]
        for m in launch.mounts:
            args += ["-v", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
        for k, v in launch.env.items():
            args += ["-e", f"{k}={v}"]
        if launch.workdir:
            args += ["--workdir", launch.workdir]
        if launch.user:
            args += ["--user", launch.user]
        args += [launch.image, *launch.argv[1:]]
        self._names.add(name)
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        await self.podman_cmd(*args)
        container = PodmanContainer(self, name, launch)
        log = open(launch.log_path, "ab")  # noqa: SIM115 - handed to the logs follower
        container._logs = await asyncio.create_subprocess_exec(self.podman, "logs", "-f", name, stdout=log,
                                                               stderr=log)
        log.close()
        return container

    async def remove(self, container: Running) -> None:
        if isinstance(container, PodmanContainer):
            await self.podman_cmd("rm", "-f", "-t", "0", container.name, check=False)
            self._names.discard(container.name)

    async def cleanup(self) -> None:
        for name in list(self._names):
            await self.podman_cmd("rm", "-f", "-t", "0", name, check=False)
        self._names.clear()

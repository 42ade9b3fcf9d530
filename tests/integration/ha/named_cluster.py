"""A 3-SCM quorum whose members are known by NAME, each name resolved through a hosts file, so a test
can restart a member on a new IP address as a Kubernetes Pod restart does (issue 11, item 10).

Every process of the cluster (SCMs, their init/bootstrap runs, the datanode simulator, the probe
client) runs in its own mount namespace where the test's hosts file is bind-mounted over /etc/hosts
(``unshare -m`` + ``mount --bind``; needs root, as CI has). Rewriting that file in place changes what
``scmN.test`` resolves to for all of them at once; the host's own /etc/hosts is never touched.
Addresses are a random 127.a.b.0/24 block: loopback only, bindable without any interface setup.
The test process itself talks to the SCMs by their current IP (``ScmProcessInfo.host``).
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from scm_server.local.cluster import SERVICE_ID
from scm_server.local.quorum import HALocalCluster

MOUNT_HOSTS = 'mount --bind "$0" /etc/hosts && exec "$@"'


def require_unshare() -> None:
    """Fail loudly (never skip) when the machine cannot give a process its own /etc/hosts."""
    if shutil.which("unshare") is None:
        raise RuntimeError("`unshare` (util-linux) is needed for the per-process /etc/hosts of this test")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(f"`unshare -m` failed ({probe.stderr.strip()}): this test needs root (CI runs as root)")


class NamedHACluster(HALocalCluster):
    def __init__(self, base_dir: Path, num_scms: int = 3, *, settings: Mapping[str, str] | None = None) -> None:
        super().__init__(base_dir, num_scms, settings=settings)
        require_unshare()
        self.net = f"127.{random.randint(64, 250)}.{random.randint(1, 250)}"
        self.hosts_file = self.base_dir / "hosts"
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for i, s in enumerate(self.scms):
            s.host = f"{self.net}.{i + 1}"
        self.launcher = ["unshare", "-m", "sh", "-c", MOUNT_HOSTS, str(self.hosts_file)]
        self.write_hosts()

    @staticmethod
    def name(index: int) -> str:
        return f"scm{index + 1}.test"

    def write_hosts(self) -> None:
        lines = ["127.0.0.1 localhost"] + [f"{s.host} {self.name(i)}" for i, s in enumerate(self.scms)]
        # in place (same inode): the bind mounts of running processes see the new content
        with self.hosts_file.open("w") as f:
            f.write("\n".join(lines) + "\n")

    def move(self, index: int, last_octet: int) -> str:
        """Point ``scm<index+1>.test`` at a new address (the process must be restarted to bind it)."""
        self.scms[index].host = f"{self.net}.{last_octet}"
        self.write_hosts()
        return self.scms[index].host

    def common_settings(self) -> dict[str, str]:
        values = super().common_settings()
        values["ozone.scm.names"] = ",".join(self.name(i) for i in range(len(self.scms)))
        for i, s in enumerate(self.scms):
            sfx = f"{SERVICE_ID}.{s.node_id}"
            values[f"ozone.scm.address.{sfx}"] = self.name(i)
            values[f"ozone.scm.http-address.{sfx}"] = f"{self.name(i)}:{s.http_port}"
        return values

    def named(self, port_attr: str) -> list[str]:
        """``scmN.test:<port>`` of every SCM, for processes inside the namespace."""
        return [f"{self.name(i)}:{getattr(s, port_attr)}" for i, s in enumerate(self.scms)]

    def spawn(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        """A helper process (datanode simulator, probe client) that resolves the names like the SCMs."""
        out = log.open("ab")
        try:
            return subprocess.Popen([*self.launcher, *args], stdout=out, stderr=subprocess.STDOUT,
                                    env=self._env(), start_new_session=True)
        finally:
            out.close()

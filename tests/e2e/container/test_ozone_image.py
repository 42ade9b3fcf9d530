"""The Ozone image (``make ozone-image``) as podman runs it, under what Pod Security ``restricted`` imposes on its
Pods (a user other than root, no capabilities, no new privileges, a read-only root file system with a ``/tmp`` of its
own): it holds every jar of the class path ``make ozone-jars`` resolves, ``ozone version`` names the pinned Ozone
release, and a wrong subcommand is one line naming the ones there are. tests/e2e/node/test_ozone_on_k8s.py runs
its datanodes, OM and CLIs on a real node."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[3]
VERSION = re.search(r"<ozone.version>(.+)</ozone.version>",
                    (REPO / "interop" / "ozone" / "pom.xml").read_text()).group(1)  # type: ignore[union-attr]
IMAGE = f"localhost/ozone:{VERSION}"
RESTRICTED = ["--user", "1000:1000", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
              "--security-opt", "no-new-privileges", "--network", "none"]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "--runtime", "runc", "run", "--rm", *RESTRICTED, IMAGE, *argv],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", autouse=True)
def image() -> None:
    if subprocess.run(["podman", "image", "exists", IMAGE], capture_output=True).returncode != 0:
        pytest.fail(f"image {IMAGE} not found: run `make ozone-image` first")


def test_it_holds_every_jar_of_the_resolved_class_path() -> None:
    cp_file = subprocess.run(["bash", str(REPO / "scripts" / "ozone_jars.sh")], capture_output=True, text=True,
                             check=True, timeout=1800).stdout.strip().splitlines()[-1]
    wanted = sorted(Path(j).name for j in Path(cp_file).read_text().strip().split(":"))
    listed = run("bash", "-c", "ls /opt/ozone/lib")
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.split()) == wanted


def test_ozone_version_runs_restricted_as_uid_1000() -> None:
    who = run("id", "-u")
    assert who.stdout.strip() == "1000"
    out = run("ozone", "version")
    assert out.returncode == 0, out.stderr
    assert re.search(rf"\b{re.escape(VERSION)}\b", out.stdout), out.stdout[-2000:]


def test_a_wrong_subcommand_is_one_line_naming_the_right_ones() -> None:
    out = run("ozone", "datanodes")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "ozone: unknown command 'datanodes': use one of datanode, om, scm, sh, admin, freon, version"]

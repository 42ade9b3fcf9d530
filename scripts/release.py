#!/usr/bin/env python3
"""Publish a release to an OCI registry: the images, the Helm chart, and a versioned manifest for ``kubectl apply``.

``make release`` builds the SCM image and the audit image (``make image audit-image``) and then runs this script,
which, for release ``VERSION`` (default: the chart's ``version``) and registry ``REGISTRY`` (``host[:port][/path]``,
default the local one of ``make registry``, 127.0.0.1:5000):

1. tags ``localhost/ozone-scm:dev`` and ``localhost/ozone-scm-audit:dev`` as ``REGISTRY/ozone-scm:VERSION`` and
   ``REGISTRY/ozone-scm-audit:VERSION`` and pushes both with podman, keeping the digests the registry stored;
2. stages a copy of ``charts/ozone-scm-operator`` with ``version``/``appVersion`` set to ``VERSION``, the operator
   image ``REGISTRY/ozone-scm`` and the CRD's default member image ``REGISTRY/ozone-scm:VERSION`` (so a cluster that
   names no image runs the release's; its audit Pods then default to ``REGISTRY/ozone-scm-audit:VERSION``), then
   ``helm package`` and ``helm push`` it to ``oci://REGISTRY/charts`` (``helm install oci://REGISTRY/charts/
   ozone-scm-operator --version VERSION``);
3. renders ``dist/ozone-scm-operator-VERSION.yaml`` from that staged chart exactly as ``make manifests`` renders
   ``manifests/`` (Namespace, CRD, RBAC, Deployment; ``kubectl apply -f`` it);
4. writes ``dist/release-VERSION.json``: every reference pushed with its digest.

``--insecure`` (plain HTTP: podman ``--tls-verify=false``, helm ``--plain-http``) is for a registry on loopback;
``make release`` passes it for the default local registry (``REGISTRY_INSECURE=1``). Pushing needs whatever login
the registry wants (``podman login`` and ``helm registry login`` first).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sync_k8s_packaging as packaging  # a sibling script, found through the line above

ROOT = packaging.ROOT
CHART_NAME = "ozone-scm-operator"
IMAGES = {"ozone-scm": "localhost/ozone-scm:dev", "ozone-scm-audit": "localhost/ozone-scm-audit:dev"}
DEFAULT_MEMBER_IMAGE = "ozone-scm:0.1.0"  # the CRD's default spec.image, replaced by the release's
# SemVer 2 (helm refuses anything else as a chart version); also a valid image tag.
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")
# host[:port][/path] with lower-case repository path components, no scheme.
REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:\d{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
HEADER = (
    "# Release {version} of ozone-scm-operator, rendered by `make release` (scripts/release.py) from {{source}}.\n"
    "# Install with: kubectl apply -f ozone-scm-operator-{version}.yaml   (see docs/kubernetes.md)\n"
)


class ReleaseError(Exception):
    """A release step failed; the message names it and what to do."""


@dataclasses.dataclass(frozen=True)
class Release:
    version: str
    registry: str
    images: dict[str, dict[str, str]]  # name -> {"reference", "digest"}
    chart: str  # oci:// reference of the chart repository
    chart_digest: str
    chart_package: str
    manifest: str

    def as_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"


def check_arguments(version: str, registry: str) -> None:
    if not SEMVER.match(version):
        raise ReleaseError(f"VERSION={version!r} is not a SemVer 2 version (helm needs one): give e.g. 0.2.0 or "
                           "0.2.0-rc.1")
    if "://" in registry or not REGISTRY.match(registry):
        raise ReleaseError(f"REGISTRY={registry!r} is not host[:port][/path] (no scheme, lower-case path): give e.g. "
                           "127.0.0.1:5000 or registry.example.com/ozone")


def _run(argv: list[str], what: str, hint: str = "") -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise ReleaseError(f"{what} failed: {detail[-1] if detail else 'exit ' + str(proc.returncode)}"
                           + (f"; {hint}" if hint else ""))
    return proc.stdout + proc.stderr


def push_image(source: str, target: str, insecure: bool, podman: str = "podman") -> str:
    """Tag ``source`` as ``target``, push it, and return the manifest digest the registry stored."""
    _run([podman, "image", "exists", source], f"finding image {source}",
         "build it first (`make image audit-image`; `make release` does)")
    _run([podman, "tag", source, target], f"tagging {source} as {target}")
    with tempfile.TemporaryDirectory() as tmp:
        digest_file = Path(tmp) / "digest"
        try:
            _run([podman, "push", f"--tls-verify={'false' if insecure else 'true'}", "--digestfile",
                  str(digest_file), target], f"pushing {target}",
                 "is the registry running and reachable (`make registry` for the local one), and logged in?")
        except ReleaseError:
            subprocess.run([podman, "untag", source, target], capture_output=True)  # leave no tag behind
            raise
        digest = digest_file.read_text().strip()
    if not digest.startswith("sha256:"):
        raise ReleaseError(f"pushing {target}: podman reported no digest ({digest!r})")
    return digest


def stage_chart(dest: Path, version: str, repository: str, member_image: str) -> Path:
    """Copy the chart to ``dest`` with the release's version and images; returns the staged chart directory."""
    chart = dest / CHART_NAME
    if chart.exists():
        shutil.rmtree(chart)
    shutil.copytree(packaging.CHART, chart)
    text = (chart / "Chart.yaml").read_text()
    text = re.sub(r"(?m)^version: .*$", f"version: {version}", text, count=1)
    text = re.sub(r"(?m)^appVersion: .*$", f'appVersion: "{version}"', text, count=1)
    (chart / "Chart.yaml").write_text(text)
    meta = yaml.safe_load(text)
    if meta["version"] != version or meta["appVersion"] != version:
        raise ReleaseError(f"could not set version {version} in {chart / 'Chart.yaml'}")
    values_path = chart / "values.yaml"
    values = values_path.read_text()
    values, n = re.subn(r"(?m)^(image:\n(?:  #.*\n)*  repository: ).*$", rf"\g<1>{repository}", values, count=1)
    if n != 1 or yaml.safe_load(values)["image"]["repository"] != repository:
        raise ReleaseError(f"{values_path} has no `image.repository` line to set to {repository}")
    values_path.write_text(values)
    crd_path = chart / "crds" / "ozonescmclusters.yaml"
    crd_path.write_text(release_crd(crd_path.read_text(), member_image))
    return chart


def _member_image_default(crd: dict[str, object]) -> list[object]:
    versions = crd["spec"]["versions"]  # type: ignore[index]
    return [v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["image"].get("default")
            for v in versions]


def release_crd(text: str, member_image: str) -> str:
    """The CRD with ``spec.image`` defaulting to the release's image (text edited, so its layout stays)."""
    before = _member_image_default(yaml.safe_load(text))
    if before != [DEFAULT_MEMBER_IMAGE] * len(before):
        raise ReleaseError(f"the CRD's spec.image defaults are {before}, expected {DEFAULT_MEMBER_IMAGE}: update "
                           "DEFAULT_MEMBER_IMAGE in scripts/release.py")
    out = text.replace(f"default: {DEFAULT_MEMBER_IMAGE}\n", f"default: {member_image}\n")
    if _member_image_default(yaml.safe_load(out)) != [member_image] * len(before):
        raise ReleaseError("could not set the CRD's spec.image default (is another field defaulting to "
                           f"{DEFAULT_MEMBER_IMAGE}?)")
    return out


def publish(version: str, registry: str, insecure: bool, out: Path, helm: Path = packaging.HELM,
            images: dict[str, str] | None = None) -> Release:
    check_arguments(version, registry)
    if not helm.exists():
        raise ReleaseError(f"{helm} is missing: run `make k8s-tools` first")
    out.mkdir(parents=True, exist_ok=True)
    pushed: dict[str, dict[str, str]] = {}
    for name, source in (images or IMAGES).items():
        reference = f"{registry}/{name}:{version}"
        pushed[name] = {"reference": reference, "digest": push_image(source, reference, insecure)}
    member_image = pushed["ozone-scm"]["reference"]
    stage = out / "release-chart"
    chart = stage_chart(stage, version, f"{registry}/ozone-scm", member_image)
    _run([str(helm), "lint", str(chart)], "helm lint of the staged chart")
    _run([str(helm), "package", str(chart), "--destination", str(out)], "helm package")
    package = out / f"{CHART_NAME}-{version}.tgz"
    chart_repo = f"oci://{registry}/charts"
    pushed_text = _run([str(helm), "push", str(package), chart_repo, *(["--plain-http"] if insecure else [])],
                       f"helm push to {chart_repo}", "is the registry running and reachable, and logged in "
                       "(`helm registry login`)?")
    found = re.search(r"Digest:\s*(sha256:[0-9a-f]{64})", pushed_text)
    if found is None:
        raise ReleaseError(f"helm push to {chart_repo} printed no digest: {pushed_text.strip()}")
    crds = {name: (chart / "crds" / name).read_text() for name in packaging.crd_sources()}  # the member image default set
    files = packaging.manifest_texts(helm, chart, crds, HEADER.format(version=version))
    manifest = out / f"{CHART_NAME}-{version}.yaml"
    manifest.write_text("---\n".join(files.values()))
    shutil.rmtree(stage)
    release = Release(version=version, registry=registry, images=pushed, chart=f"{chart_repo}/{CHART_NAME}",
                      chart_digest=found.group(1), chart_package=str(package), manifest=str(manifest))
    (out / f"release-{version}.json").write_text(release.as_json())
    return release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_version = yaml.safe_load((packaging.CHART / "Chart.yaml").read_text())["version"]
    parser.add_argument("--version", default=default_version, help=f"release version (default {default_version})")
    parser.add_argument("--registry", default="127.0.0.1:5000", help="host[:port][/path] (default 127.0.0.1:5000)")
    parser.add_argument("--insecure", action="store_true", help="plain HTTP to the registry (a loopback registry)")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the package and manifest go (dist/)")
    args = parser.parse_args(argv)
    try:
        release = publish(args.version, args.registry, args.insecure, args.out)
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    for image in release.images.values():
        print(f"release: pushed {image['reference']}@{image['digest']}")
    print(f"release: pushed chart {release.chart}:{release.version}@{release.chart_digest}")
    print(f"release: wrote {release.manifest}")
    print(f"install: helm install ozone-scm-operator {release.chart} --version {release.version}"
          f"{' --plain-http' if args.insecure else ''} -n ozone-scm-system --create-namespace")
    print(f"     or: kubectl apply -f {release.manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

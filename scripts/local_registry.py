#!/usr/bin/env python3
"""Run a real OCI registry (Debian's ``docker-registry``, the CNCF distribution registry 2.8) on loopback, with its
own configuration and storage directory: the registry ``make release`` pushes to by default (``make registry``,
127.0.0.1:5000, storage in ``.registry/``) and the one the release tests start on a free port
(``tests/e2e/container/test_release.py``).

Plain HTTP on 127.0.0.1 only: podman needs ``--tls-verify=false`` and helm ``--plain-http`` for it, which
``scripts/release.py --insecure`` passes (``make release`` does for the default registry).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def write_config(root: Path, port: int, host: str = "127.0.0.1") -> Path:
    """The registry's configuration under ``root`` (storage in ``root/data``); returns the file's path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    config = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
        "http": {"addr": f"{host}:{port}", "secret": secrets.token_hex(16)},
    }
    path = root / "config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def binary() -> str:
    found = shutil.which("docker-registry")
    if found is None:
        sys.exit("docker-registry is not installed: run `make registry-tools` (Debian's docker-registry package)")
    return found


def wait_ready(url: str, deadline_s: float = 20.0) -> None:
    """Poll ``<url>/v2/`` (the registry's API root answers 200) until it answers or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/v2/", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.1)
    raise TimeoutError(f"the registry at {url} did not answer /v2/ within {deadline_s:.0f} s: {last}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")
    parser.add_argument("--root", type=Path, default=ROOT / ".registry",
                        help="configuration and storage directory (default .registry/)")
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port {args.port} is not a TCP port: give 1-65535")
    config = write_config(args.root, args.port)
    print(f"local_registry: serving 127.0.0.1:{args.port} (storage {args.root / 'data'}); Ctrl-C stops it",
          flush=True)
    os.execv(binary(), ["docker-registry", "serve", str(config)])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

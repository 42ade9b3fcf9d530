#!/usr/bin/env bash
# Install Debian's `docker-registry` (the CNCF distribution registry, 2.8): a real OCI registry that the release
# tests (tests/e2e/container/test_release.py) and `make registry` run on loopback with their own config and storage.
# Debian's package also installs a systemd unit; it is not used (nothing here starts it). Idempotent; needs root
# (apt). Used by `make registry-tools`, and so by `make e2e-container` and `make registry`.
set -euo pipefail

if ! command -v docker-registry >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install_registry: need root to apt-get install docker-registry" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
fi
echo "install_registry: $(docker-registry --version)"

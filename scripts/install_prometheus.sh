#!/usr/bin/env bash
# Install Debian's `prometheus` package (the `prometheus` server and `promtool`), used by `make monitoring-test`
# and `make test` (tests/monitoring: `promtool check rules`, `promtool test rules`, a real Prometheus scraping a
# local SCM quorum). Idempotent: does nothing when both binaries are on PATH. Needs root (or sudo) for apt-get;
# fails loudly, never skips, when they cannot be installed.
#
# The package's own systemd unit is not used: the tests start their own Prometheus on a loopback port with a temporary
# configuration and data directory. Tested with 2.42 (Debian 12).
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
  else
    echo "install_prometheus: prometheus/promtool missing and not root (no sudo): install Debian's 'prometheus' package" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends prometheus >/dev/null; then
  $SUDO apt-get update >/dev/null
  $SUDO apt-get install -y --no-install-recommends prometheus >/dev/null
fi

for tool in prometheus promtool; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install_prometheus: '$tool' still not on PATH after apt-get install prometheus" >&2
    exit 1
  fi
done
echo "install_prometheus: $(promtool --version 2>&1 | head -n1)"

#!/usr/bin/env bash
# Install Debian's `prometheus` package (the `prometheus` server and `promtool`), used by `make monitoring-test`
# and `make test` (tests/monitoring: `promtool check rules`, `promtool test rules`, a real Prometheus scraping a
# local SCM quorum). Idempotent: does nothing when both binaries are on PATH. Needs root (or sudo) for apt-get;
# fails loudly, never skips, when they cannot be installed.
#
# The package's own systemd unit is not used: the tests start their own Prometheus on a loopback port with a temporary
# configuration and data directory. Tested with 2.42 (Debian 12).
set -euo pipefail

bash "$(dirname "$0")/apt_install.sh" install_prometheus prometheus prometheus promtool
echo "install_prometheus: $(promtool --version 2>&1 | head -n1)"

#!/usr/bin/env bash
# Install Debian's `chromium` package, run headless by `make browser-test` (tests/browser: the SCM status page and the
# audit report loaded in a real browser over the DevTools protocol). Idempotent; fails loudly (scripts/apt_install.sh).
# Tested with 156.
set -euo pipefail
bash "$(dirname "$0")/apt_install.sh" install_chromium chromium chromium
echo "install_chromium: $(chromium --version 2>/dev/null | head -n1)"

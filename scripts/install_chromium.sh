#!/usr/bin/env bash
# Install Debian's `chromium` package, run headless by `make browser-test` (tests/browser: the SCM status page and the
# audit report loaded in a real browser over the DevTools protocol). Idempotent: does nothing when `chromium` is on
# PATH. Needs root (or sudo) for apt-get; fails loudly, never skips, when it cannot be installed. Tested with 156.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
  else
    echo "install_chromium: chromium missing and not root (no sudo): install Debian's 'chromium' package" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends chromium >/dev/null; then
  $SUDO apt-get update >/dev/null
  $SUDO apt-get install -y --no-install-recommends chromium >/dev/null
fi

if ! command -v chromium >/dev/null 2>&1; then
  echo "install_chromium: 'chromium' still not on PATH after apt-get install chromium" >&2
  exit 1
fi
echo "install_chromium: $(chromium --version 2>/dev/null | head -n1)"

#!/usr/bin/env bash
# Install a Debian package for a test tier unless its binaries are already on PATH:
#   scripts/apt_install.sh WHO PACKAGE BINARY [BINARY ...]
# WHO names the caller in messages. Idempotent: does nothing when every BINARY is on PATH. Needs root (or sudo) for
# apt-get; fails loudly, never skips, when the package cannot be installed or a binary is still missing after it.
set -euo pipefail

who=$1
package=$2
shift 2

missing=0
for tool in "$@"; do
  command -v "$tool" >/dev/null 2>&1 || missing=1
done
[ "$missing" -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"
  else
    echo "$who: $* missing and not root (no sudo): install Debian's '$package' package" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends "$package" >/dev/null; then
  $SUDO apt-get update >/dev/null
  $SUDO apt-get install -y --no-install-recommends "$package" >/dev/null
fi

for tool in "$@"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$who: '$tool' still not on PATH after apt-get install $package" >&2
    exit 1
  fi
done

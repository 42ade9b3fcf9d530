#!/usr/bin/env bash
# Install the benchmark anchors that do not come from pip: etcd 3.4 from Debian (etcd-server, etcd-client).
# PySyncObj comes from the venv's "bench" extra (scripts/bootstrap.sh installs it).
# Idempotent; needs root (or sudo) for apt-get. Used by bench/raft_bench.py when etcd is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v etcd >/dev/null 2>&1; then
  echo "etcd already installed: $(command -v etcd)"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "install_bench_deps.sh: etcd is missing and we are not root (no sudo): run 'apt-get install -y etcd-server etcd-client' as root" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq etcd-server etcd-client
  # Debian starts a default etcd service on 2379/2380; the benchmark runs its own members on free ports.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    $SUDO systemctl stop etcd || true
    $SUDO systemctl disable etcd || true
  fi
fi
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import pysyncobj" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "pysyncobj==0.3.17"
fi
etcd --version | sed -n 1p  # (head would end the pipe early: SIGPIPE under pipefail)

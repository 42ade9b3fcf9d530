#!/usr/bin/env bash
# Start or remove the node tier's single-node cluster by hand (make k8s-node first):
#   scripts/k8s_node.sh up WORKDIR     in the foreground until Ctrl-C or SIGTERM, which stop everything it started
#   scripts/k8s_node.sh down WORKDIR   remove what an `up` left behind (its processes by PID from the tier's
#                                      cgroup, the cgroups, the network namespace), e.g. after a crash
# The admin kubeconfig is WORKDIR/control-plane/admin.kubeconfig. Needs root. tests/e2e/node/cluster.py does it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] && { [ "$1" = up ] || [ "$1" = down ]; } \
  || { echo "usage: scripts/k8s_node.sh up|down WORKDIR (WORKDIR: a directory for the node's state and logs)" >&2; exit 2; }
exec .venv/bin/python -m tests.e2e.node.cluster "$1" "$2"

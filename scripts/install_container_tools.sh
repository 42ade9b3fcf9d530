#!/usr/bin/env bash
# Install what the container tier needs: podman (with runc; crun fails to set rlimits on the project's machines),
# debootstrap (to build the local base image without a registry) and iproute2 (network namespaces for the local
# kubelet fixture). Idempotent; needs root (apt). Used by `make image`, `make e2e-container` and `.ci/run`.
set -euo pipefail

need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install_container_tools: need root to apt-get install ${need[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The default runtime's rlimit setup fails here; an empty default_ulimits list avoids it (see docs/kubernetes.md).
conf=/etc/containers/containers.conf
if [ "$(id -u)" -eq 0 ] && ! grep -qs '^default_ulimits *= *\[\]' "$conf"; then
  mkdir -p /etc/containers
  if grep -qs '^\[containers\]' "$conf"; then
    sed -i '/^\[containers\]/a default_ulimits = []' "$conf"
  else
    printf '[containers]\ndefault_ulimits = []\n' >> "$conf"
  fi
fi
echo "install_container_tools: $(podman --version), runc $(runc --version | head -n1 | awk '{print $3}'), debootstrap $(debootstrap --version | awk '{print $2}')"

#!/usr/bin/env bash
# Install the node runtime of the node test tier (make k8s-node) from Debian: containerd (1.6; kubelet 1.35 still
# accepts it and falls back to its own cgroup driver setting, which the tier gives), runc, the CNI plugins (bridge,
# host-local, loopback, portmap in /usr/lib/cni), podman (builds the pause image), iptables and conntrack (kube-proxy).
# Idempotent; needs root (apt). The packages' own services are not used: the tier starts containerd itself with its
# own configuration, state and socket (tests/e2e/node/cluster.py).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_container_tools.sh >/dev/null
bash scripts/apt_install.sh install_k8s_node_runtime containerd containerd ctr
bash scripts/apt_install.sh install_k8s_node_runtime containernetworking-plugins /usr/lib/cni/bridge
bash scripts/apt_install.sh install_k8s_node_runtime iptables iptables
bash scripts/apt_install.sh install_k8s_node_runtime conntrack conntrack
for plugin in bridge host-local loopback portmap; do
  [ -x "/usr/lib/cni/$plugin" ] || { echo "install_k8s_node_runtime: /usr/lib/cni/$plugin missing after installing" \
    "containernetworking-plugins" >&2; exit 1; }
done
# Debian's package starts containerd as a service where systemd runs; the tier never uses that instance.
echo "install_k8s_node_runtime: $(containerd --version | awk '{print $1, $3}'), runc $(runc --version | head -n1 | awk '{print $3}'), CNI plugins $(dpkg-query -W -f='${Version}' containernetworking-plugins)"

#!/usr/bin/env bash
# Build the node of the node test tier (make k8s-node) into .tools/bin, beside the control plane that
# scripts/build_k8s_control_plane.sh builds:
#   - kubelet, kube-scheduler and kube-proxy from the k8s.io/kubernetes module and version that tools/k8s-control-plane
#     pins for the API server (one go.mod, so the versions cannot differ);
#   - coredns from github.com/coredns/coredns, with only the plugins a cluster DNS needs (tools/k8s-node/coredns);
#   - ozone-scm-pause, the sandbox ("pause") process the project writes itself (tools/k8s-node/pause).
# containerd, runc and the CNI plugins come from Debian (scripts/install_k8s_node_runtime.sh).
#
# Only the Go module proxy is used (through the go command). Idempotent and cached per part: a stamp names the module
# versions and the go.sum hash; when it matches and the binaries exist, that part is skipped. Builds run under
# `nice` with GOMAXPROCS/-p limits (K8S_CP_JOBS, default 2): the machines have 2 cores shared with other work.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS=${TOOLS_DIR:-.tools}
BIN="$TOOLS/bin"
JOBS=${K8S_CP_JOBS:-2}
GO=${GO:-go}
command -v "$GO" >/dev/null || { echo "build_k8s_node: no go command on PATH" >&2; exit 1; }
mkdir -p "$BIN"
abs_bin=$(cd "$BIN" && pwd)
t0=$(date +%s)

build() {  # build MODULE_DIR OUT PKG LDFLAGS
  local s; s=$(date +%s)
  (cd "$1" && GOMAXPROCS=$JOBS CGO_ENABLED=0 nice -n 15 "$GO" build -p "$JOBS" -trimpath \
     -ldflags "$4" -o "$abs_bin/$2.new" "$3")
  mv -f "$abs_bin/$2.new" "$abs_bin/$2"
  echo "build_k8s_node: $2 built in $(($(date +%s) - s)) s ($(du -m "$abs_bin/$2" | cut -f1) MB)"
}
fresh() {  # fresh STAMP VALUE BINARY...: true when every binary exists and the stamp matches
  local stamp=$1 value=$2; shift 2
  for b in "$@"; do [ -x "$BIN/$b" ] || return 1; done
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$value" ]
}

# ---- kubelet, kube-scheduler, kube-proxy: the API server's module and version ------------------------------------
MOD=tools/k8s-control-plane
K8S_VERSION=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$MOD/go.mod")
value="k8s=${K8S_VERSION} gosum=$(sha256sum "$MOD/go.sum" | cut -c1-16) go=$("$GO" env GOVERSION)"
stamp="$BIN/.k8s-node.stamp"
if ! fresh "$stamp" "$value" kubelet kube-scheduler kube-proxy; then
  major=${K8S_VERSION#v}; major=${major%%.*}
  minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
  vpkg=k8s.io/component-base/version
  ldflags="-s -w -X ${vpkg}.gitVersion=${K8S_VERSION} -X ${vpkg}.gitMajor=${major} -X ${vpkg}.gitMinor=${minor}"
  ldflags+=" -X ${vpkg}.gitTreeState=clean -X ${vpkg}.buildDate=1970-01-01T00:00:00Z"
  (cd "$MOD" && nice -n 15 "$GO" mod download)
  build "$MOD" kubelet k8s.io/kubernetes/cmd/kubelet "$ldflags"
  build "$MOD" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$ldflags"
  build "$MOD" kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$ldflags"
  for b in kubelet kube-scheduler kube-proxy; do
    grep -qx "Kubernetes ${K8S_VERSION}" <<<"$("$abs_bin/$b" --version)" \
      || { echo "build_k8s_node: $b reports $("$abs_bin/$b" --version)" >&2; exit 1; }
  done
  echo "$value" > "$stamp"
fi

# ---- coredns: its own module, the plugins a cluster DNS uses ----------------------------------------------------
MOD=tools/k8s-node/coredns
COREDNS_VERSION=$(grep -m1 -oE "github.com/coredns/coredns v[0-9.]+" "$MOD/go.mod" | cut -d" " -f2)
[ -n "$COREDNS_VERSION" ] || { echo "build_k8s_node: no github.com/coredns/coredns version in $MOD/go.mod" >&2; exit 1; }
value="coredns=${COREDNS_VERSION} gosum=$(sha256sum "$MOD/go.sum" | cut -c1-16) go=$("$GO" env GOVERSION)"
stamp="$BIN/.coredns.stamp"
if ! fresh "$stamp" "$value" coredns; then
  (cd "$MOD" && nice -n 15 "$GO" mod download)
  build "$MOD" coredns . "-s -w"
  # the output read whole, then matched: `cmd | grep -q` fails under pipefail when grep exits before cmd's
  # last line (SIGPIPE; coredns -version prints two)
  grep -q "CoreDNS-${COREDNS_VERSION#v}" <<<"$("$abs_bin/coredns" -version)" \
    || { echo "build_k8s_node: coredns reports $("$abs_bin/coredns" -version)" >&2; exit 1; }
  echo "$value" > "$stamp"
fi

# ---- the pause process: no dependencies beyond the standard library ---------------------------------------------
MOD=tools/k8s-node/pause
value="pause=$(cat "$MOD"/go.mod "$MOD"/*.go | sha256sum | cut -c1-16) go=$("$GO" env GOVERSION)"
stamp="$BIN/.pause.stamp"
if ! fresh "$stamp" "$value" ozone-scm-pause; then
  build "$MOD" ozone-scm-pause . "-s -w"
  echo "$value" > "$stamp"
fi
echo "build_k8s_node: done in $(($(date +%s) - t0)) s"

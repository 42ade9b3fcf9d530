#!/usr/bin/env bash
# Build the real Kubernetes control plane for the control-plane test tier (make k8s-control-plane):
# kube-apiserver and kube-controller-manager from the k8s.io/kubernetes Go module, and etcd from
# go.etcd.io/etcd/server/v3, at the versions pinned in tools/k8s-control-plane/go.mod, into .tools/bin.
#
# Only the Go module proxy is used (through the go command). Idempotent and cached: a stamp file names the pinned
# versions and the go.sum hash; when it matches and the three binaries exist, nothing is done. Builds run under
# `nice` with GOMAXPROCS/-p limits (K8S_CP_JOBS, default 2): the machines have 2 cores shared with other work.
# The module cache and build cache are the go command's own (GOMODCACHE, GOCACHE: outside the repo).
set -euo pipefail
cd "$(dirname "$0")/.."

MOD=tools/k8s-control-plane
TOOLS=${TOOLS_DIR:-.tools}
BIN="$TOOLS/bin"
JOBS=${K8S_CP_JOBS:-2}
K8S_VERSION=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$MOD/go.mod")
ETCD_VERSION=$(grep -m1 -oE "go.etcd.io/etcd/server/v3 v[0-9.]+" "$MOD/go.mod" | cut -d" " -f2)
GO=${GO:-go}
command -v "$GO" >/dev/null || { echo "build_k8s_control_plane: no go command on PATH" >&2; exit 1; }
stamp_value="k8s=${K8S_VERSION} etcd=${ETCD_VERSION} gosum=$(sha256sum "$MOD/go.sum" | cut -c1-16) go=$("$GO" env GOVERSION)"
stamp="$BIN/.k8s-control-plane.stamp"

if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/etcd" ] \
   && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_value" ]; then
  exit 0
fi

mkdir -p "$BIN"
abs_bin=$(cd "$BIN" && pwd)
major=${K8S_VERSION#v}; major=${major%%.*}
minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
# What `kubectl version`, helm's Capabilities and /version report (the upstream release build sets the same).
vpkg=k8s.io/component-base/version
ldflags="-s -w -X ${vpkg}.gitVersion=${K8S_VERSION} -X ${vpkg}.gitMajor=${major} -X ${vpkg}.gitMinor=${minor}"
ldflags+=" -X ${vpkg}.gitTreeState=clean -X ${vpkg}.buildDate=1970-01-01T00:00:00Z"

t0=$(date +%s)
(cd "$MOD" && nice -n 15 "$GO" mod download)
t1=$(date +%s)
echo "build_k8s_control_plane: modules for k8s.io/kubernetes ${K8S_VERSION} and etcd ${ETCD_VERSION} present ($((t1 - t0)) s)"
build() {  # build OUT PKG
  local s; s=$(date +%s)
  (cd "$MOD" && GOMAXPROCS=$JOBS CGO_ENABLED=0 nice -n 15 "$GO" build -p "$JOBS" -trimpath \
     -ldflags "$ldflags" -o "$abs_bin/$1.new" "$2")
  mv -f "$abs_bin/$1.new" "$abs_bin/$1"
  echo "build_k8s_control_plane: $1 built in $(($(date +%s) - s)) s ($(du -m "$abs_bin/$1" | cut -f1) MB)"
}
build etcd ./etcd
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
# the output read whole, then matched: `cmd | grep -q` fails under pipefail when grep exits before cmd's
# last line (SIGPIPE; coredns -version prints two)
grep -qx "Kubernetes ${K8S_VERSION}" <<<"$("$abs_bin/kube-apiserver" --version)" \
  || { echo "build_k8s_control_plane: kube-apiserver reports $("$abs_bin/kube-apiserver" --version)" >&2; exit 1; }
echo "$stamp_value" > "$stamp"
echo "build_k8s_control_plane: done in $(($(date +%s) - t0)) s"

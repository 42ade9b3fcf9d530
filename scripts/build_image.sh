#!/usr/bin/env bash
# Build the project's image with podman from the wheels in dist/wheels (`make wheels`), on the local Debian base
# (scripts/build_base_image.sh) unless BASE_IMAGE names another (e.g. docker.io/library/python:3.11-slim-bookworm).
# Prints the image's size. Used by `make image` and `.ci/run`.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${IMAGE_TAG:-ozone-scm:dev}
TARGET=${IMAGE_TARGET:-runtime}  # audit: the Spark audit image (make audit-image)
bash scripts/install_container_tools.sh >/dev/null
if [ -z "${BASE_IMAGE:-}" ]; then
  BASE_IMAGE=localhost/debian:bookworm
  bash scripts/build_base_image.sh
fi
if ! ls dist/wheels/pip-*.whl >/dev/null 2>&1 || ! ls dist/wheels/ozone_scm-*.whl >/dev/null 2>&1; then
  echo "build_image: dist/wheels has no ozone_scm or pip wheel; run 'make wheels' first" >&2
  exit 1
fi
# One podman build at a time on this machine: each build's prune of untagged labelled images would remove another
# build's intermediate stages (podman: "reading image ...: image not known").
exec 9>"${TMPDIR:-/tmp}/ozone-scm-podman-build.lock"
flock 9
podman --runtime runc build --quiet --build-arg "BASE_IMAGE=$BASE_IMAGE" --target "$TARGET" \
  --label ozone-scm.build=1 -t "$TAG" . >/dev/null
# The builder stage and replaced tags stay behind as untagged images; remove ours (labelled) only.
podman image prune -f --filter label=ozone-scm.build=1 >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$TAG")
base=$(podman image inspect --format '{{.Size}}' "$BASE_IMAGE" 2>/dev/null || echo 0)
venv=$(podman run --rm --runtime runc "$TAG" du -sb /opt/ozone-scm | awk '{print $1}')
awk -v t="$TAG" -v s="$size" -v b="$BASE_IMAGE" -v bs="$base" -v v="$venv" 'BEGIN {
  printf "build_image: %s is %.0f MB (base %s: %.0f MB, /opt/ozone-scm: %.0f MB)\n", t, s/1e6, b, bs/1e6, v/1e6 }'

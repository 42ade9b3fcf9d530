#!/usr/bin/env bash
# Build the local base image `localhost/debian:bookworm` without a registry: debootstrap a minimal Debian bookworm
# (with python3, which the image needs anyway), drop what no container reads (apt lists and caches, docs, man
# pages, locales), and `podman import` the tree. Reused while it exists (podman's image store is the cache between
# runs of a session); created from scratch on a clean machine. Force a rebuild with REBUILD=1.
# Used by `make image`. Needs root, podman and debootstrap (scripts/install_container_tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${BASE_IMAGE_NAME:-localhost/debian:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-}

if [ "${REBUILD:-0}" != 1 ] && podman image exists "$IMAGE"; then
  echo "build_base_image: $IMAGE exists ($(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')); REBUILD=1 to recreate"
  exit 0
fi
bash scripts/install_container_tools.sh >/dev/null

root=$(mktemp -d /var/tmp/ozone-base.XXXXXX)
cleanup() {
  # debootstrap mounts /proc (and may bind /dev) inside the tree: unmount before removing, never cross mounts.
  awk -v r="$root" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m" || true; done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
echo "build_base_image: debootstrap --variant=minbase $SUITE (about 2 minutes)"
debootstrap --variant=minbase --include=python3 "$SUITE" "$root" ${MIRROR:+"$MIRROR"} >/dev/null
# What no container of ours reads; removing it before the import keeps it out of every layer.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*
find "$root"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} +
tar -C "$root" --one-file-system -c . | podman import --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "build_base_image: $IMAGE ($(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"

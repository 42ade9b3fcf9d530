#!/usr/bin/env bash
# Build the Ozone image (images/ozone/Dockerfile, tag localhost/ozone:2.2.0 unless OZONE_IMAGE_TAG says otherwise)
# with podman: Apache Ozone's released jars as `make ozone-jars` resolves them (scripts/ozone_jars.sh, pinned in
# interop/ozone/pom.xml) copied into a staging context build/ozone-image/, on the local Debian base
# (scripts/build_base_image.sh) unless BASE_IMAGE names another. Prints the build's time and the image's size.
# Used by `make ozone-image`.
set -euo pipefail
cd "$(dirname "$0")/.."

version="$(sed -n 's:.*<ozone.version>\(.*\)</ozone.version>.*:\1:p' interop/ozone/pom.xml)"
TAG=${OZONE_IMAGE_TAG:-localhost/ozone:$version}
bash scripts/install_container_tools.sh >/dev/null
if [ -z "${BASE_IMAGE:-}" ]; then
  BASE_IMAGE=localhost/debian:bookworm
  bash scripts/build_base_image.sh
fi
classpath_file="$(bash scripts/ozone_jars.sh | tail -n 1)"
start=$EPOCHREALTIME
ctx=build/ozone-image
rm -rf "$ctx"
mkdir -p "$ctx/lib"
n=0
while IFS= read -r jar; do
  [ -n "$jar" ] || continue  # (the class path file has no final newline: the echo below ends its last entry)
  [ -f "$jar" ] || { echo "build_ozone_image: $jar (on $classpath_file) is missing: run 'make ozone-jars'" >&2; exit 1; }
  if [ -e "$ctx/lib/$(basename "$jar")" ]; then
    echo "build_ozone_image: two jars named $(basename "$jar") on the class path; the image's lib/ cannot hold both" >&2
    exit 1
  fi
  cp "$jar" "$ctx/lib/"
  n=$((n + 1))
done < <(tr ":" "\n" < "$classpath_file"; echo)
cp images/ozone/ozone images/ozone/log4j.properties images/ozone/log4j2.properties "$ctx/"
chmod -R u=rwX,go=rX "$ctx" && chmod 0755 "$ctx/ozone"
# One podman build at a time on this machine: each build's prune of untagged labelled images would remove another
# build's intermediate stages (podman: "reading image ...: image not known").
exec 9>"${TMPDIR:-/tmp}/ozone-scm-podman-build.lock"
flock 9
podman --runtime runc build --quiet --build-arg "BASE_IMAGE=$BASE_IMAGE" --label ozone-scm.build=1 \
  -f images/ozone/Dockerfile -t "$TAG" "$ctx" >/dev/null
podman image prune -f --filter label=ozone-scm.build=1 >/dev/null
rm -rf "$ctx"
end=$EPOCHREALTIME
size=$(podman image inspect --format '{{.Size}}' "$TAG")
awk -v t="$TAG" -v s="$size" -v n="$n" -v v="$version" -v secs="$(awk "BEGIN{print $end - $start}")" 'BEGIN {
  printf "build_ozone_image: %s (Apache Ozone %s, %d jars) is %.0f MB, built in %.0f s\n", t, v, n, s/1e6, secs }'

#!/usr/bin/env bash
# Build the Java side of `make interop-test` into .interop-build/ (git-ignored): Java classes generated from the
# project's own wire protos (proto/ozone/) with Debian's protoc, com.google.protobuf renamed to Hadoop's shaded
# org.apache.hadoop.thirdparty.protobuf (as Hadoop's build does), and the test client in tests/interop/java/,
# compiled against Hadoop's client jars that ship inside PySpark. Installs protobuf-compiler and a JDK with apt
# when missing (needs root). Rebuilds only when an input changed.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.interop-build
PY=.venv/bin/python

install_pkg() {  # $1 = the command that is missing, $2 = the Debian package providing it
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "build_interop_java: '$1' is missing; install Debian's $2 (apt-get install -y $2)" >&2
    exit 1
  fi
  echo "build_interop_java: installing $2 (for $1)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$2" >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }
}
command -v protoc >/dev/null 2>&1 || install_pkg protoc protobuf-compiler
command -v javac >/dev/null 2>&1 || { mkdir -p /usr/share/man/man1; install_pkg javac openjdk-17-jdk-headless; }

JARS="$($PY -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
API="$(ls "$JARS"/hadoop-client-api-*.jar | head -n1)"
RUNTIME="$(ls "$JARS"/hadoop-client-runtime-*.jar | head -n1)"
[ -f "$API" ] && [ -f "$RUNTIME" ] || { echo "build_interop_java: Hadoop client jars not found under $JARS" >&2; exit 1; }

stamp="$(cat proto/ozone/*.proto $(find tests/interop/java -name '*.java' | sort) scripts/build_interop_java.sh \
  | sha256sum | cut -c1-16)-$(protoc --version | tr ' ' _)"
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$stamp" ]; then
  exit 0
fi
rm -rf "$OUT"
mkdir -p "$OUT/gen" "$OUT/classes"
protoc -Iproto --java_out="$OUT/gen" proto/ozone/hdds.proto proto/ozone/ScmServerProtocol.proto \
  proto/ozone/ScmServerDatanodeHeartbeatProtocol.proto proto/ozone/ScmAdminProtocol.proto \
  proto/ozone/ScmServerSecurityProtocol.proto proto/ozone/ScmSecretKeyProtocol.proto
find "$OUT/gen" -name '*.java' -print0 | xargs -0 sed -i 's/com\.google\.protobuf/org.apache.hadoop.thirdparty.protobuf/g'
javac -nowarn -encoding UTF-8 -d "$OUT/classes" -cp "$API:$RUNTIME" \
  $(find "$OUT/gen" tests/interop/java -name '*.java') 2>&1 | grep -v '^Note:' || true
[ -f "$OUT/classes/ozonescm/interop/InteropClient.class" ] || { echo "build_interop_java: javac failed" >&2; exit 1; }
echo "$JARS/*:$OUT/classes" > "$OUT/classpath"
echo "$stamp" > "$OUT/stamp"
echo "build_interop_java: built $OUT/classes ($(protoc --version), $(javac -version 2>&1))"

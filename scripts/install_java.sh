#!/usr/bin/env bash
# Make sure a Java 17+ runtime is there for Spark (the replication audit: `ozone-scm audit run`, its tests and
# benchmark). Idempotent: does nothing when JAVA_HOME/bin/java or `java` on PATH is 17 or newer; otherwise installs
# Debian's openjdk-17-jre-headless (needs root). Used by scripts/bootstrap.sh (make env), so a fresh machine gets it.
set -euo pipefail

java_major() {  # prints the major version of the given java binary, or nothing
  "$1" -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}

java_bin=""
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
  java_bin="$JAVA_HOME/bin/java"
elif command -v java >/dev/null 2>&1; then
  java_bin="$(command -v java)"
fi
major=""
[ -n "$java_bin" ] && major="$(java_major "$java_bin" || true)"
if [ -n "$major" ] && [ "$major" -ge 17 ] 2>/dev/null; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install_java: Spark needs Java 17+ (found: ${major:-none}); install it as root:" \
       "apt-get install -y openjdk-17-jre-headless, or set JAVA_HOME to a JDK 17+" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_java: Spark needs Java 17+ (found: ${major:-none}) and this machine has no apt-get;" \
       "install a JDK 17+ and set JAVA_HOME" >&2
  exit 1
fi
echo "install_java: installing openjdk-17-jre-headless (Spark needs Java 17+, found: ${major:-none})"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Debian's JRE post-install expects the man directory that slim images leave out.
mkdir -p /usr/share/man/man1
apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null
echo "install_java: $(java -version 2>&1 | head -n1)"

#!/usr/bin/env bash
# Resolve Apache Ozone's released jars (interop/ozone/pom.xml, versions pinned there) from Maven Central into
# ~/.m2 and write their class path to interop/ozone/target/ozone.classpath (git-ignored). Prints how long the
# resolution took and whether it was cold (jars downloaded) or cached. Idempotent: when the class path file is
# newer than the pom and every jar on it exists, Maven is not run at all.
#   scripts/ozone_jars.sh            resolve (or reuse) and print the class path file's name
#   scripts/ozone_jars.sh --force    run Maven even when the class path is up to date
#   OZONE_JARS_PROJECT=interop/ozone-recon scripts/ozone_jars.sh   the same for another project of interop/
#                                    (Recon's, kept off the other components' class path)
# Needs Java 17+ (the JDK: javac), and Maven (installed with apt-get when missing and running as root).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
project="$here/${OZONE_JARS_PROJECT:-interop/ozone}"
[ -f "$project/pom.xml" ] || { echo "ozone_jars: no pom.xml in $project (OZONE_JARS_PROJECT names a folder of interop/)" >&2; exit 1; }
out="$project/target/ozone.classpath"
force=0
[ "${1:-}" = "--force" ] && force=1

need() {  # need <command> <debian package>
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ozone_jars: installing $2" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
  else
    echo "ozone_jars: $1 is missing; install $2" >&2
    exit 1
  fi
}
need java openjdk-17-jre-headless
# javac: tests/ozone_interop/AdminBatch.java (many `ozone admin` commands in one JVM) is compiled against the jars
command -v javac >/dev/null 2>&1 || mkdir -p /usr/share/man/man1  # Debian's JDK package writes a man page there
need javac openjdk-17-jdk-headless
need mvn maven

up_to_date() {
  [ -s "$out" ] && [ "$out" -nt "$project/pom.xml" ] || return 1
  local jar
  while IFS= read -r jar; do
    [ -n "$jar" ] || continue
    [ -f "$jar" ] || return 1
  done < <(tr ':' '\n' < "$out"; echo)  # the file has no final newline: the echo ends its last entry
}

if [ "$force" -eq 0 ] && up_to_date; then
  echo "ozone_jars: class path up to date ($(tr ':' '\n' < "$out" | wc -l) jars), Maven not run" >&2
  echo "$out"
  exit 0
fi

version="$(sed -n 's:.*<ozone.version>\(.*\)</ozone.version>.*:\1:p' "$project/pom.xml")"
repo="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}"
marker="$repo/org/apache/ozone/ozone-manager/$version/ozone-manager-$version.jar"
state=cached
[ -f "$marker" ] || state=cold
start=$EPOCHREALTIME
mkdir -p "$project/target"
log="$project/target/mvn.log"
if ! mvn -B -f "$project/pom.xml" -Dmaven.repo.local="$repo" dependency:build-classpath \
    -Dmdep.outputFile="$out" -Dmdep.includeScope=runtime >"$log" 2>&1; then
  echo "ozone_jars: Maven failed (full log: $log):" >&2
  grep -E '^\[ERROR\]' "$log" | head -n 20 >&2
  exit 1
fi
end=$EPOCHREALTIME
touch "$out"  # the plugin leaves an unchanged file as it was; its time marks "resolved after the pom changed"
n=$(tr ':' '\n' < "$out" | wc -l)
size=$(tr ':' '\n' < "$out" | xargs du -cm | tail -n 1 | cut -f1)
printf 'ozone_jars: Apache Ozone %s, %d jars (%s MiB) resolved %s in %.1f s\n' \
  "$version" "$n" "$size" "$state" "$(awk "BEGIN{print $end - $start}")" >&2
echo "$out"

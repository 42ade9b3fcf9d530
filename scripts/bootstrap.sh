#!/usr/bin/env bash
# Create the project's virtual environment and install everything `make test` / `make run` need.
# Idempotent; used by the Makefile (which then generates protobuf code with scripts/gen_proto.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${EXTRAS:-dev,bench,operator,audit,spark}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# gssapi (Kerberos on Hadoop RPC) builds from source against MIT Kerberos' headers and krb5-config.
bash scripts/apt_install.sh "make env" libkrb5-dev krb5-config
.venv/bin/python -m pip install --quiet -e ".[${EXTRAS}]"
# Spark (the replication audit's tests and `ozone-scm audit run`) needs Java 17+.
case ",${EXTRAS}," in *,spark,*) bash scripts/install_java.sh ;; esac

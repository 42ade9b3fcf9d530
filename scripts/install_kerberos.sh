#!/usr/bin/env bash
# MIT Kerberos for the Kerberos test tier (make kerberos-test): a real KDC (krb5kdc, kdb5_util), kadmin.local to
# make principals and keytabs, kinit/klist/kvno for clients, faketime for a skewed client clock. Idempotent; fails loudly when a package cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
bash scripts/apt_install.sh kerberos-test krb5-kdc krb5kdc kdb5_util
bash scripts/apt_install.sh kerberos-test krb5-admin-server kadmin.local
bash scripts/apt_install.sh kerberos-test krb5-user kinit klist kvno
# a client whose clock is beyond Kerberos' skew limit (libfaketime)
bash scripts/apt_install.sh kerberos-test faketime faketime

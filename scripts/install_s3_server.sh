#!/usr/bin/env bash
# Install Debian's S3-compatible server for `make s3-test`: radosgw (Ceph's RADOS Gateway) with the one-node Ceph it
# needs beside it (ceph-mon, ceph-osd; tests/s3/radosgw.py starts them on loopback ports with a memstore OSD, no disk,
# no ceph-mgr). Debian 12's radosgw 16.2.15 (Ceph Pacific) has no standalone backend (dbstore came with Ceph 17),
# hence the mon and the OSD. Idempotent: does nothing when every binary is on PATH. Needs root (or sudo) for apt-get;
# fails loudly, never skips, when they cannot be installed (about 1 minute on a fresh machine).
set -euo pipefail

here=$(dirname "$0")
bash "$here/apt_install.sh" install_s3_server radosgw radosgw radosgw-admin
bash "$here/apt_install.sh" install_s3_server ceph-mon ceph-mon monmaptool ceph-authtool ceph
bash "$here/apt_install.sh" install_s3_server ceph-osd ceph-osd
echo "install_s3_server: $(radosgw --version 2>&1 | head -n1)"

# The one image of the project: the SCM daemon and its CLI (`ozone-scm`), the datanode simulator
# (`ozone-scm datanode-sim`) and the Kubernetes operator (`ozone-scm-operator`), chosen by command:
#
#   podman run IMAGE ozone-scm scm --init        # or scm --bootstrap, scm (the default command)
#   podman run IMAGE ozone-scm datanode-sim --count 3 --scm scm:19861          # gRPC; or --protocol hadoop-rpc --scm scm:9861
#   podman run IMAGE ozone-scm-operator
#
# Build with `make image` (wheels are built on the host first, `make wheels` -> dist/wheels, and installed offline,
# so the build needs no network from inside a container; see docs/operations.md "Container image"):
#   make image                                                   # local Debian base made by scripts/build_base_image.sh
#   make image BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm   # a public Python image
#
# Stages: `python` (the base plus a Python 3.11 interpreter), `builder` (a virtualenv filled from the wheels, with
# its bytecode compiled), `runtime` (the base plus the finished virtualenv; no wheels, pip or build tools in any of
# its layers; runs as uid 1000). `runtime` is the default target and stays the last stage.
#
# The Spark audit image (`make audit-image`, target `audit`, tag ozone-scm-audit:dev) is the same virtualenv plus
# PySpark and pyarrow (`make audit-wheels` -> dist/audit-wheels) on the base with Debian's Java 17 runtime; it runs
# the operator's audit CronJob Pods (`spec.audit.image`, docs/audit.md). Its stages (`audit-builder`, `audit`) are
# not built for `--target runtime`.
ARG BASE_IMAGE=localhost/debian:bookworm

FROM ${BASE_IMAGE} AS python
# Public Python images have python3 already; a Debian base gets the distribution's (3.11 in bookworm, the version
# the host-built wheels are for). Only the interpreter: no pip, venv or compilers.
RUN if ! command -v python3 >/dev/null 2>&1; then \
      apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*; \
    fi \
 && python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'

FROM python AS builder
COPY dist/wheels /tmp/wheels
# pip runs from its own wheel (Debian's python3 has no ensurepip), installing into a virtualenv without pip.
# The kubernetes client's asyncio twin (kubernetes/aio, ~70 MB with bytecode) is dropped: kopf talks to the API
# with aiohttp and the operator uses the synchronous client; the imports are checked right after.
RUN python3 -m venv --without-pip /opt/ozone-scm \
 && pip_wheel=$(ls /tmp/wheels/pip-*.whl) \
 && python3 "$pip_wheel/pip" --python /opt/ozone-scm/bin/python install --quiet --no-index \
      --find-links /tmp/wheels --no-compile 'ozone-scm[operator]' \
 && find /opt/ozone-scm -depth -type d \( -name tests -o -name __pycache__ \) -path '*/site-packages/*' \
      -exec rm -rf {} + \
 && rm -rf /opt/ozone-scm/lib/python3.11/site-packages/kubernetes/aio \
 && /opt/ozone-scm/bin/python -m compileall -q -j 0 /opt/ozone-scm/lib >/dev/null \
 && /opt/ozone-scm/bin/ozone-scm --help >/dev/null \
 && /opt/ozone-scm/bin/python -c 'import kopf, kubernetes.client, kubernetes.config' \
 && if [ -x /opt/ozone-scm/bin/ozone-scm-operator ]; then /opt/ozone-scm/bin/ozone-scm-operator --help >/dev/null; fi

FROM builder AS audit-builder
# dist/ whole (dist/audit-wheels only exists after `make audit-wheels`; this stage only runs for --target audit)
COPY dist /tmp/dist
RUN pip_wheel=$(ls /tmp/wheels/pip-*.whl) \
 && python3 "$pip_wheel/pip" --python /opt/ozone-scm/bin/python install --quiet --no-index \
      --find-links /tmp/wheels --find-links /tmp/dist/audit-wheels --no-compile 'ozone-scm[operator,spark]' \
 && find /opt/ozone-scm -depth -type d \( -name tests -o -name __pycache__ \) -path '*/site-packages/*' \
      -exec rm -rf {} + \
 && /opt/ozone-scm/bin/python -m compileall -q -j 0 /opt/ozone-scm/lib >/dev/null \
 && /opt/ozone-scm/bin/python -c 'import pyspark, pyarrow, scm_audit.job' \
 && /opt/ozone-scm/bin/ozone-scm audit run --help >/dev/null

FROM python AS audit
# Spark needs a Java 17 runtime (the JRE's post-install expects the man directory slim bases leave out).
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/* \
 && java -version
COPY --from=audit-builder /opt/ozone-scm /opt/ozone-scm
ENV PATH=/opt/ozone-scm/bin:$PATH \
    OZONE_CONF_DIR=/etc/ozone \
    PYTHONUNBUFFERED=1
RUN (command -v useradd >/dev/null && useradd --uid 1000 --user-group --create-home --home-dir /var/lib/ozone --shell /bin/bash ozone \
      || echo 'ozone:x:1000:1000::/var/lib/ozone:/bin/bash' >> /etc/passwd) \
 && mkdir -p /audit /etc/ozone /var/lib/ozone \
 && chown -R 1000:1000 /audit /etc/ozone /var/lib/ozone
USER 1000:1000
WORKDIR /var/lib/ozone
CMD ["ozone-scm", "audit", "run", "--help"]

FROM python AS runtime
COPY --from=builder /opt/ozone-scm /opt/ozone-scm
ENV PATH=/opt/ozone-scm/bin:$PATH \
    OZONE_CONF_DIR=/etc/ozone \
    PYTHONUNBUFFERED=1
RUN (command -v useradd >/dev/null && useradd --uid 1000 --user-group --create-home --home-dir /var/lib/ozone --shell /bin/bash ozone \
      || echo 'ozone:x:1000:1000::/var/lib/ozone:/bin/bash' >> /etc/passwd) \
 && mkdir -p /data/metadata /etc/ozone /var/lib/ozone \
 && printf '%s\n' '<?xml version="1.0"?>' '<configuration>' \
      '  <property><name>ozone.scm.client.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.block.client.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.datanode.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.security.service.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.client.grpc.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.block.client.grpc.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.datanode.grpc.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.security.service.grpc.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.ratis.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.grpc.bind.host</name><value>0.0.0.0</value></property>' \
      '</configuration>' > /etc/ozone/ozone-site.xml \
 && chown -R 1000:1000 /data /etc/ozone /var/lib/ozone
# Configure with a mounted /etc/ozone/ozone-site.xml or, as Ozone's images do, with environment variables
# OZONE-SITE.XML_<key>=<value> (e.g. OZONE-SITE.XML_ozone.metadata.dirs=/data/metadata). Their names are not shell
# identifiers: `sh -c` (dash) drops them, `bash -c` and exec keep them.
USER 1000:1000
WORKDIR /var/lib/ozone
VOLUME ["/data"]
# Ozone's protocols over Hadoop RPC on Ozone's ports (Ozone's OM, datanodes, `ozone admin`): client 9860,
# datanode 9861, block 9863, security 9961; ours over gRPC (our client, CLI, simulator, the operator): client 19860,
# datanode 19861, block 19863, security 19961; web 9876, Raft 9894, inter-SCM 9895
EXPOSE 9860 9861 9863 9961 19860 19861 19863 19961 9876 9894 9895
CMD ["ozone-scm", "scm"]

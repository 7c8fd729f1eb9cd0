# Self-bootstrapping: every target creates .venv and installs what is missing.
SHELL        := /bin/bash
PYTHON       ?= python3
VENV         := .venv
PY           := $(VENV)/bin/python
STAMP        := $(VENV)/.installed
BACKEND_DIRS := $(patsubst %/pyproject.toml,%,$(wildcard backends/*/pyproject.toml))
PYTEST_ARGS  ?=

.PHONY: demo test test-full lint bench fuzz fuzz-differential fuzz-parser setup system-deps clean docs-ops

demo: setup
	$(PY) examples/demo.py

# `make test`: the fast tier (one dtype per code path and the cross-cutting tests; see
# tests/conftest.py), except in CI (CI=true, as .ci/run sets it): the full sweep.
# `make test-full`: the full sweep (every dtype, the campaigns, the end-to-end installs).
TEST_TIER := $(if $(filter true TRUE True,$(CI)),,--fast)
# Two passes: every test but those marked `serial` on one pytest-xdist worker per core (a
# file stays on one worker, in order; tests/conftest.py starts the long files first), then
# the `serial` ones alone (a test that installs into this environment, which the others
# would see; the tests that install a backend do it in a venv or folder of their own and
# are not serial). The second pass collects only the files that use the marker (none: no
# second pass), or PYTEST_ARGS's; exit status 5 is "no test selected" (PYTEST_ARGS naming
# files without serial tests). TEST_WORKERS=0: one process.
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): the
# suite starts hundreds of Python processes and pytest rewrites axle's asserts in each, which
# without cached bytecode compiles every module again (about 4 s of CPU per pytest process).
TEST_WORKERS ?= auto
PYTEST = env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest
SERIAL_FILES := $(shell grep -rlE --include='test_*.py' 'mark\.serial' tests)
SERIAL_ARGS   = $(or $(strip $(PYTEST_ARGS)),$(SERIAL_FILES))
PYTEST_PASSES = $(PYTEST) $(1) -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" \
	$(PYTEST_ARGS) $(if $(SERIAL_ARGS),&& { $(PYTEST) $(1) -m serial $(SERIAL_ARGS) || [ $$? -eq 5 ]; })

test: setup
	$(call PYTEST_PASSES,$(TEST_TIER))

test-full: setup
	$(call PYTEST_PASSES,)

# ruff and mypy over the core and the in-tree backends (configured in pyproject.toml), and
# a reason after every noqa and type: ignore. Any finding fails; in CI (CI=true, as .ci/run
# sets it) `make test` runs it first.
LINT_PATHS := core/axle $(filter-out %.egg-info,$(wildcard backends/*/axle_*))

lint: setup
	$(VENV)/bin/ruff check $(LINT_PATHS) tools/check_suppressions.py
	$(VENV)/bin/mypy
	$(PY) tools/check_suppressions.py $(LINT_PATHS)

ifneq ($(filter true TRUE True 1,$(CI)),)
test: lint
endif

# docs/ops/: one page per op, the output of `axle explain-op` (tests/sdk/test_explain_op.py
# fails when a page is stale). Needs the in-tree backends cpu, opencl and template.
docs-ops: setup
	rm -f docs/ops/*.md
	$(PY) -m axle explain-op --write-docs docs/ops

BENCH_STAMP  := $(VENV)/.bench-installed
BENCH_ARGS   ?=

# Runs every benchmarks/bench_*.py and writes docs/benchmarks.md + docs/benchmarks.png
# (BENCH_ARGS=--quick for a fast check that everything runs).
bench: setup $(BENCH_STAMP)
	$(PY) benchmarks/run.py $(BENCH_ARGS)

# The core's and every backend's `bench` extra (plot, baselines); a missing extra is a warning.
$(BENCH_STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(BACKEND_DIRS))
	$(PY) -m pip install -q -e '.[bench]' $(foreach d,$(BACKEND_DIRS),-e '$(d)[bench]')
	touch $(BENCH_STAMP)

# Long campaigns, outside `make test` (docs/reliability.md, "Running the campaigns").
# FUZZ_TARGETS lists the campaigns: each NAME is a fuzz-NAME rule below.
# FUZZ_PROGRAMS random programs per config from seed FUZZ_SEED; FUZZ_ARGS passes more
# options, e.g. FUZZ_ARGS="--backends cpu --modes optimized --time-limit 600".
FUZZ_TARGETS  ?= differential parser
FUZZ_PROGRAMS ?= 10000
FUZZ_SEED     ?= 0
FUZZ_ARGS     ?=

fuzz: $(addprefix fuzz-,$(FUZZ_TARGETS))

# Random programs on every installed backend, optimized and not, against the interpreter.
fuzz-differential: setup
	$(PY) -m axle.testing.fuzz --programs $(FUZZ_PROGRAMS) --seed-start $(FUZZ_SEED) $(FUZZ_ARGS)

# Mutated IR texts through parse, verify, compile and run: only axle errors may come out.
fuzz-parser: setup
	$(PY) tools/parser_fuzz.py --n $(FUZZ_PROGRAMS) --seed $(FUZZ_SEED)

setup: system-deps $(STAMP)

# System packages (OpenCL runtime, GraphViz, a C compiler): installed when running as
# root, otherwise the exact command is printed.
system-deps:
	@bash tools/system_deps.sh

$(STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(BACKEND_DIRS))
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]' $(addprefix -e ,$(BACKEND_DIRS))
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build

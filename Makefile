# Self-bootstrapping: every target creates .venv and installs what is missing.
SHELL        := /bin/bash
PYTHON       ?= python3
VENV         := .venv
PY           := $(VENV)/bin/python
STAMP        := $(VENV)/.installed
BACKEND_DIRS := $(patsubst %/pyproject.toml,%,$(wildcard backends/*/pyproject.toml))
PYTEST_ARGS  ?=

.PHONY: demo test bench setup system-deps clean

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) -m pip install -q -e '.[bench]' 2>/dev/null || true
	$(PY) benchmarks/run.py

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

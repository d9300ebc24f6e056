# kvbudget: `make demo` and `make test` work on a fresh machine (Python >= 3.11 with venv).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

include mk/live.mk
export KVBUDGET_VLLM_PYTHON

.PHONY: install install-test bytecode demo test lint typecheck unit api-docs clean

# setuptools' editable build ends with an "Editable installation" notice (InformationOnly, a
# UserWarning from setuptools.command.editable_wheel, whichever editable mode): only that module's
# notices are silenced; its errors, and every other warning, still show.
EDITABLE_QUIET = PYTHONWARNINGS=ignore::UserWarning:setuptools.command.editable_wheel

# The package with its runtime dependencies: all that `make demo` needs.
$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || { echo "kvbudget: creating the virtual environment $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "kvbudget: upgrading pip"
	$(PY) -m pip install -q --upgrade pip
	@echo "kvbudget: installing kvbudget and its dependencies into $(VENV) (about a minute the first time)"
	$(EDITABLE_QUIET) $(PY) -m pip install -q -e .
	@touch $(STAMP)

# Everything the tests use: dev tools, the profile extra (torch 2.13.0 CPU build, transformers),
# the Jupyter kernel the notebooks run on, and the CPU vLLM for the live tests (outside the tree).
$(STAMP)-test: $(STAMP)
	$(PY) -m pip install -q torch==2.13.0  # the CPU build; an unpinned torch pulls a CUDA one
	$(EDITABLE_QUIET) $(PY) -m pip install -q -e '.[dev,profile,ray,serve]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@# headless Chromium renders `kvbudget report` in a test (skipped where it cannot be had)
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
		|| echo "chromium unavailable: the report rendering test will be skipped"
	@touch $(STAMP)-test

# Byte-compile the project: pip does it for installed packages, not for an editable install, and
# with PYTHONDONTWRITEBYTECODE set every command would recompile its modules at start (~0.05 s).
# A .pyc whose source has since changed is ignored; this is quick when nothing changed.
bytecode: $(STAMP)
	@echo "kvbudget: byte-compiling the project"
	$(PY) -m compileall -q kvbudget policies workloads results perf analysis simulator studies live cli
	@# and the compiled methods of its dataclasses, which .pyc files do not keep (cli/method_cache.py)
	@$(PY) -m kvbudget.cli.method_cache

install: $(STAMP) bytecode
install-test: $(STAMP)-test live-env bytecode

demo: install
	@echo "kvbudget: simulating the default scenario under four admission policies: Llama-3.1-8B"
	@echo "  on one H100-80GB, 5 minutes of 70 % interactive, 30 % batch requests at 5.5 req/s,"
	@echo "  about 1.07x what the conservative policy sustains at 90 % SLO attainment (README.md);"
	@echo "  5.5 req/s is the Poisson rate they are drawn at and 70 % each request's chance of the"
	@echo "  interactive tier: this seed's 1,617 requests, 69 % interactive, arrive at 5.4 req/s,"
	@echo "  the offered rate the tables and their conclusion name"
	$(VENV)/bin/kvbudget compare --policies unlimited,conservative,overcommit,preemptive

lint: $(STAMP)-test
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)-test
	$(VENV)/bin/mypy

# The suite runs on every core plus one (pytest-xdist, in the dev extra): many tests wait on a
# server or a subprocess they started (the CPU vLLM, a Ray cluster, Jupyter kernels, the CLI),
# and the extra worker keeps the cores busy meanwhile. A file goes to one worker at a time, so
# the live tests, which are one file, share one worker and one vLLM server. The files run in the
# order tests/conftest.py gives (the slowest first), not xdist's (the largest first).
# PYTEST_ARGS= (empty) runs it in one process. The 25 slowest tests are listed at the end.
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST_ARGS ?= -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

unit: $(STAMP)-test
	$(VENV)/bin/pytest -q -m "not live" $(PYTEST_ARGS)

test: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

# The API reference, generated from the docstrings (pdoc); any warning fails the build.
API_MODULES := kvbudget $(addprefix kvbudget.,policies workloads results perf analysis simulator studies live cli)
api-docs: $(STAMP)-test
	rm -rf build/api
	$(PY) -W error -m pdoc -d restructuredtext --no-show-source -o build/api $(API_MODULES)
	@echo "API reference: build/api/index.html"

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info

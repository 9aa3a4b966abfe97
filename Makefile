# Two commands for a newcomer (see README):
#   make run    set up .venv and start the main job
#   make test   set up .venv (with torch CPU + test tools) and run the whole suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: run test bench samples clean

# Python's bytecode cache, written once: where the environment turns it off
# (PYTHONDONTWRITEBYTECODE), every overlapscope process the tests and the dashboard start
# would compile the package again (0.2-0.3 s each).
unexport PYTHONDONTWRITEBYTECODE

# PYTHONWARNINGS=ignore: setuptools warns that the data folders (sql/queries, the samples) are no
# packages; they are package data by design, and the warning is noise for a newcomer.
$(VENV)/.base: pyproject.toml
	@echo "overlapscope: creating $(VENV) and installing the package and its dependencies (once; about a minute)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install -q --disable-pip-version-check --upgrade pip
	@PYTHONWARNINGS=ignore $(PIP) install -q --disable-pip-version-check -e .
	@touch $@

# Test environment: the package, torch pinned to the CPU build, pytest, playwright.
$(VENV)/.dev: $(VENV)/.base constraints-dev.txt
	@echo "overlapscope: installing the test tools and torch (CPU build, pinned in constraints-dev.txt) (once)"
	@PYTHONWARNINGS=ignore $(PIP) install -q --disable-pip-version-check -c constraints-dev.txt -e '.[dev,tracer]'
	@touch $@

run: $(VENV)/.base
	@echo "overlapscope: starting the dashboard (the sample runs load in the background; Ctrl+C stops it)"
	@$(VENV)/bin/overlapscope dashboard

# The browser test drives Debian's chromium: installed here when missing and we are
# root (best effort, quietly); without it that test skips, and says so up front with how
# to install it. NO_CHROMIUM=1 skips the install.
# Each test file runs on one worker (--dist loadfile): a file's module fixtures (a captured
# run, a built wheel, a 200 MB trace) are made once, never twice at once (the wheel's
# build in build/ raced itself across workers). xdist's loadgroup marks do not reach
# pytest 9's node ids, so files are the unit.
test: $(VENV)/.dev
	@if [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; then :; \
	elif [ -z "$(NO_CHROMIUM)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "overlapscope: installing Debian's chromium for the browser tests (apt-get; make test NO_CHROMIUM=1 skips it and those tests)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 \
	    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } \
	    || echo "note: chromium could not be installed; the browser test will skip"; \
	elif [ -z "$(NO_CHROMIUM)" ]; then \
	    echo "overlapscope: chromium is not installed, so the browser tests will skip (to run them: sudo apt-get install chromium, or any chromium on PATH)"; \
	fi
	@echo "overlapscope: running the test suite on 2 processes (about 9 to 11 minutes on 2 cores)"
	$(PY) -m pytest -n 2 --dist loadfile -q --durations=20

# Holistic Trace Analysis in its own venv, to measure beside it (skipped when PyPI is unreachable).
.bench/hta-venv/bin/python:
	$(PYTHON) -m venv .bench/hta-venv
	.bench/hta-venv/bin/pip install -q HolisticTraceAnalysis==0.5.0 || rm -rf .bench/hta-venv

bench: $(VENV)/.dev
	-@$(MAKE) -s .bench/hta-venv/bin/python
	$(PY) benchmarks/bench_analyze.py

clean:
	rm -rf $(VENV) .pytest_cache

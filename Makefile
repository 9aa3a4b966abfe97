# Two commands for a newcomer (see README):
#   make run    set up .venv and start the main job
#   make test   set up .venv (with torch CPU + test tools) and run the whole suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: run test bench samples clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

# Test environment: the package, torch pinned to the CPU build, pytest, playwright.
$(VENV)/.dev: $(VENV)/.base constraints-dev.txt
	$(PIP) install -q -c constraints-dev.txt -e '.[dev,tracer]'
	touch $@

run: $(VENV)/.base
	$(VENV)/bin/overlapscope analyze sample_traces/ddp_gloo_2rank

test: $(VENV)/.dev
	$(PY) -m pytest -n 2 -q

bench: $(VENV)/.dev
	$(PY) benchmarks/bench_analyze.py

clean:
	rm -rf $(VENV) .pytest_cache

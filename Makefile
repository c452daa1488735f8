# Two commands on a fresh machine with Python 3.11+ and make:
#   make demo   - a self-contained team that needs no API key
#   make test   - lint (ruff), types (mypy), then the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-smoke clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,sdk,ray]'
	$(BIN)/python -m orchestrator.agents.keeper || true   # the per-attempt keeper (C); agents run without it if it cannot be built
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/orchestrator demo

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/run.py

bench-smoke: $(STAMP)
	$(BIN)/python bench/run.py --smoke

clean:
	rm -rf $(VENV) .orchestrator

# Two commands on a fresh machine with Python 3.11+ and make:
#   make demo   - a self-contained team that needs no API key
#   make test   - the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench bench-smoke clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,sdk]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/orchestrator demo

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/run.py

bench-smoke: $(STAMP)
	$(BIN)/python bench/run.py --smoke

clean:
	rm -rf $(VENV) .orchestrator

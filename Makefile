# Two commands on a fresh machine with Python 3.11+ and make:
#   make demo     - a self-contained team that needs no API key
#   make test     - lint (ruff, types), then the fast tier: units, replays, real-process tests of OS guarantees
#   make test-all - lint, then every test (Ray, the real Claude CLI, chaos, the bench smoke, the wheel installs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all test-browser lint bench bench-smoke schema clean

# the editable install compiles the keeper (setup.py), so a change to keeper.c installs again
$(STAMP): pyproject.toml setup.py orchestrator/agents/keeper.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,sdk,ray,otel,notify]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/orchestrator demo

# the tiers are pytest markers (tests/conftest.py marks `full` what the fast tier leaves out)
test: lint
	$(BIN)/python -m pytest -m 'not full' $(PYTEST_ARGS)

test-all: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# the dashboard in a real browser: Playwright drives Debian's chromium (its own download is not used); test-all runs these too
test-browser: $(STAMP)
	.ci/needs chromium
	$(BIN)/python -m pytest -m browser tests/test_web_browser.py $(PYTEST_ARGS)

# every static check; each new one (an import contract, ...) is one more line here
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# what the benchmark starts besides the orchestrator: a C compiler for its no-op agent, inotifywait for a baseline,
# musl-gcc for the keeper as a machine with musl-tools builds it (docs/operations.md, The keeper).
# It measures the orchestrator as users get it: the wheel, installed into a venv of its own (an editable
# install's import hook adds about 15 ms to every start of the CLI)
BENCH_VENV := build/bench/venv
bench: $(STAMP)
	.ci/needs cc musl-gcc inotifywait
	rm -rf build/bench/dist && mkdir -p build/bench
	$(BIN)/python -m build --wheel --outdir build/bench/dist . > build/bench/wheel.log 2>&1 \
	  || { tail -20 build/bench/wheel.log; echo "make bench: building the wheel failed (build/bench/wheel.log)"; exit 1; }
	$(PYTHON) -m venv --clear $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet "$$(ls build/bench/dist/*.whl)[sdk,ray,otel]"
	BENCH_ORCHESTRATOR=$(abspath $(BENCH_VENV))/bin/orchestrator $(BIN)/python bench/run.py

bench-smoke: $(STAMP)
	.ci/needs cc inotifywait
	$(BIN)/python bench/run.py --smoke

schema: $(STAMP)   # roles.schema.json from the models of roles.yaml (a test fails while it is stale)
	$(BIN)/orchestrator config schema > roles.schema.json.tmp && mv roles.schema.json.tmp roles.schema.json

clean:
	rm -rf $(VENV) .orchestrator

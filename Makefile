# The two commands a newcomer runs:  make demo  |  make test
VENV ?= .venv
PY   := $(VENV)/bin/python
# A second venv with onnxruntime-openvino (it installs the same `onnxruntime`
# module as the CPU wheel, so it cannot share .venv): the real OpenVINO + CPU
# partitioned graph that tests/collectors/ort/test_placement_openvino.py records
# and captures (the project with its extra `openvino`).
OV_VENV ?= .venv-ov
SOAK_S ?= 3600
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup demo run system-deps test lint bench fuzz dashboards metrics-doc clean

setup: $(VENV)/.installed $(OV_VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@python3 -c 'import ensurepip, venv' 2>/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv; }
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(OV_VENV)/.installed: pyproject.toml | $(VENV)/.installed
	python3 -m venv $(OV_VENV)
	$(OV_VENV)/bin/python -m pip install -q --upgrade pip
	$(OV_VENV)/bin/python -m pip install -q -e '.[openvino,analytics]'
	touch $@

## Main job: capture a real ONNX model shipped in a PyPI package (magika), print KAR/LTS/SII/latency.
demo: $(VENV)/.installed
	$(VENV)/bin/aaco-exporter capture --model magika --iterations 200

## The always-on daemon on the same model; /metrics on :9464.
run: $(VENV)/.installed
	$(VENV)/bin/aaco-exporter run --model magika

## Debian packages the tests use for real: Prometheus/promtool, Chromium (the report in a browser) and bcc (eBPF), plus tracefs and the BCC header tree.
system-deps: setup
	@command -v promtool >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }
	$(SUDO) scripts/setup-bcc.sh $(VENV) $(CURDIR)/.bcc-headers

test: setup system-deps
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check exporter collectors stream_analytics benchmarks dashboards tests
	$(VENV)/bin/mypy --strict exporter collectors stream_analytics

bench: setup
	$(PY) benchmarks/bench_pipeline.py
	$(PY) benchmarks/bench_event_latency.py
	$(PY) benchmarks/bench_outbox.py
	$(PY) benchmarks/bench_rocprof.py
	$(PY) benchmarks/bench_rocpd.py
	$(PY) benchmarks/bench_replay.py --baseline-ref ebc07ac --repeat 4
	$(PY) benchmarks/bench_trace_held.py --rows 1000000 --baseline-ref c9988e4
	$(PY) benchmarks/bench_capture_overhead.py
	$(PY) benchmarks/bench_instrument.py
	$(PY) benchmarks/bench_attribution.py
	$(PY) benchmarks/bench_daemon_cost.py --baseline-ref cbcdf75 --sched-interval 1
	$(PY) benchmarks/daemon_cpu_by_function.py
	$(PY) benchmarks/bench_nats_floor.py
	$(PY) benchmarks/bench_kernel_diff.py
	$(PY) benchmarks/bench_diff_cmd.py --baseline-ref 286fbbe
	$(PY) benchmarks/bench_llm_bus.py
	$(PY) benchmarks/bench_otlp_llm.py
	$(SUDO) $(PY) benchmarks/bench_lab_noise.py
	$(SUDO) $(PY) benchmarks/bench_sched_overhead.py
	$(PY) benchmarks/soak.py --duration $(SOAK_S) --out benchmarks/results/soak.json

## docs/metrics.md's metric table, generated from exporter/catalogue.py (a test fails on drift).
metrics-doc: setup
	$(PY) -m exporter.catalogue --write docs/metrics.md

## Fuzz every parser of external input: FUZZ_CASES per parser on one core; exit 1 on a crash
## (inputs saved under benchmarks/results/fuzz). CI runs the same targets at 200 cases each.
FUZZ_CASES ?= 100000
fuzz: setup
	taskset -c 0 $(PY) benchmarks/fuzz_parsers.py --cases $(FUZZ_CASES) --out benchmarks/results/fuzz

dashboards: setup
	$(PY) dashboards/generate.py --out dashboards/grafana

clean:
	rm -rf $(VENV) $(OV_VENV) sessions .bcc-headers

#!/usr/bin/env bash
# A bare `pip install .` (no extras) into a fresh venv runs the daemon and the
# captures that need no extra; a feature that needs one says which, in one line.
#
#   scripts/bare-install-check.sh [PYTHON]        (default: python3; needs PyPI)
#
# Checks, in order: no extra's package got installed; `aaco-exporter --help`;
# `run` (embedded nats-server, free ports) serves /metrics; `capture -- CMD`
# and `replay` of a real rocprofv3 CSV write a bundle (without trace.pftrace,
# which needs the perfetto extra, said in one line), so does `replay` of a
# real Kineto trace; `run --otlp-endpoint` and `diff` (of that bundle) say
# which extra they need in one line, exit status 2, no traceback. Prints "bare install check: ok" last; exits non-zero on the
# first failure. Everything lives in a temporary directory, removed at exit.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${1:-python3}"
TMP="$(mktemp -d -t aaco-bare-XXXXXX)"
DAEMON=""
cleanup() {
  if [ -n "$DAEMON" ] && kill -0 "$DAEMON" 2>/dev/null; then
    kill "$DAEMON" 2>/dev/null || true
    wait "$DAEMON" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "bare install check: FAILED: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "fresh venv, pip install . (no extras)"
"$PY" -m venv "$TMP/venv"
V="$TMP/venv/bin"
"$V/python" -m pip install -q --disable-pip-version-check "$ROOT"
for pkg in onnxruntime onnx opentelemetry-sdk perfetto river scipy; do
  if "$V/python" -m pip show -q "$pkg" >/dev/null 2>&1; then
    fail "$pkg is installed by a bare install"
  fi
done
AACO="$V/aaco-exporter"
cd "$TMP"  # not the source tree: the installed package must be what runs

step "aaco-exporter --help"
"$AACO" --help >"$TMP/help.txt" || fail "--help exited $?"
grep -q "capture" "$TMP/help.txt" || fail "--help lists no commands"

free_port() { "$V/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# one_line_error LOG EXTRA: the command failed with exit 2 and one stderr line naming EXTRA
one_line_error() {
  local log="$1" extra="$2"
  grep -q "Traceback" "$log" && fail "traceback in $log: $(cat "$log")"
  [ "$(grep -c . "$log")" = 1 ] || fail "expected one line in $log, got: $(cat "$log")"
  grep -q "needs the '$extra' extra: pip install 'aaco-exporter\[$extra\]'" "$log" \
    || fail "no '$extra' extra named in $log: $(cat "$log")"
}

step "run: /metrics served"
PORT="$(free_port)"; NPORT="$(free_port)"
"$AACO" run --metrics-addr "127.0.0.1:$PORT" --nats-listen "127.0.0.1:$NPORT" \
  --state-dir "$TMP/state" --duration 15 --log-level WARNING >"$TMP/run.log" 2>&1 &
DAEMON=$!
ok=""
for _ in $(seq 1 40); do
  if curl -sf "http://127.0.0.1:$PORT/metrics" -o "$TMP/metrics.txt" \
     && grep -q '^aaco_collector_up{collector="discovery"' "$TMP/metrics.txt"; then
    ok=1; break
  fi
  kill -0 "$DAEMON" 2>/dev/null || break
  sleep 0.5
done
[ -n "$ok" ] || fail "run did not serve /metrics: $(cat "$TMP/run.log")"
grep -q '^aaco_exporter_build_info' "$TMP/metrics.txt" || fail "no build info on /metrics"
wait "$DAEMON" || fail "run exited $? ($(cat "$TMP/run.log"))"
DAEMON=""
grep -q "Traceback" "$TMP/run.log" && fail "traceback in run: $(cat "$TMP/run.log")"

step "capture -- CMD: bundle without trace.pftrace, said in one line"
PATH="$V:/usr/bin:/bin" "$AACO" capture --out "$TMP/sessions" --quiet -- sleep 1 \
  >"$TMP/capture.out" 2>"$TMP/capture.err" || fail "capture exited $?: $(cat "$TMP/capture.err")"
SESSION="$(tail -n 1 "$TMP/capture.out")"
[ -f "$SESSION/session.json" ] || fail "capture wrote no bundle ($SESSION)"
[ -f "$SESSION/telemetry/system_events.parquet" ] || fail "capture bundle lacks system_events"
[ ! -e "$SESSION/trace.pftrace" ] || fail "trace.pftrace written without the perfetto extra"
grep -q "Traceback" "$TMP/capture.err" && fail "traceback in capture: $(cat "$TMP/capture.err")"
[ "$(grep -c "trace.pftrace needs the 'perfetto' extra" "$TMP/capture.err")" = 1 ] \
  || fail "capture did not say once that the trace needs the perfetto extra: $(cat "$TMP/capture.err")"

step "replay of a real rocprofv3 kernel trace (CSV)"
"$AACO" replay "$ROOT/collectors/rocprof/testdata/kernel_trace.csv" --out "$TMP/sessions" \
  >"$TMP/replay.out" 2>"$TMP/replay.err" || fail "replay exited $?: $(cat "$TMP/replay.err")"
[ -f "$(tail -n 1 "$TMP/replay.out")/profiler/kernels.parquet" ] || fail "replay wrote no kernels"

step "run --otlp-endpoint without the otlp extra"
set +e
"$AACO" run --otlp-endpoint 127.0.0.1:4317 --metrics-addr "127.0.0.1:$(free_port)" \
  --nats-listen "127.0.0.1:$(free_port)" --duration 1 >/dev/null 2>"$TMP/otlp.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "run --otlp-endpoint exited $rc, not 2: $(cat "$TMP/otlp.err")"
one_line_error "$TMP/otlp.err" otlp

step "replay of a real Kineto trace (ProfilerStep iterations), then diff without the analytics extra"
"$AACO" replay "$ROOT/collectors/rocprof/testdata/mi250_minitoy_train_ROCm6_2_kineto.json.gz" \
  --out "$TMP/sessions" >"$TMP/kineto.out" 2>"$TMP/kineto.err" \
  || fail "kineto replay exited $?: $(cat "$TMP/kineto.err")"
STEPS="$(tail -n 1 "$TMP/kineto.out")"
[ -f "$STEPS/metrics/inference_iters.parquet" ] || fail "kineto replay wrote no iterations"
# diff needs >= 3 iterations and the trace has 2: a synthetic copy repeats them 5 times
SYN="$TMP/synthetic_steps_x5"
cp -r "$STEPS" "$SYN"
"$V/python" -c 'import sys, pyarrow as pa, pyarrow.parquet as pq
p = sys.argv[1] + "/metrics/inference_iters.parquet"
pq.write_table(pa.concat_tables([pq.read_table(p)] * 5), p)' "$SYN"
set +e
"$AACO" diff --baseline "$SYN" --session "$SYN" >/dev/null 2>"$TMP/diff.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "diff exited $rc, not 2: $(cat "$TMP/diff.err")"
one_line_error "$TMP/diff.err" analytics

echo "bare install check: ok"

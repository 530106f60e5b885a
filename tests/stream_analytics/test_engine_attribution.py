"""Online join of GPU kernels (no iteration) to iteration spans of their pid.

Times are hand-picked; expectations are computed by hand in the comments.
B is an arbitrary wall-clock origin (ns).
"""

from __future__ import annotations

import json
import time
from itertools import permutations

import pyarrow as pa
import pytest

from stream_analytics.engine import Analytics

B = 1_700_000_000_000_000_000
S = 1_000_000_000  # one second in ns
PID = 9


def _spans(rows: list[tuple[int, int, int]], source: str = "instrument",
           model: str = "m") -> pa.Table:
    it, s, e = zip(*rows, strict=True)
    return pa.table({"model": [model] * len(rows), "pid": [PID] * len(rows),
                     "iteration": list(it), "start_ns": list(s), "end_ns": list(e),
                     "duration_ns": [b - a for a, b in zip(s, e, strict=True)],
                     "source": [source] * len(rows)})


def _kernels(rows: list[tuple[int, int, int | None, int | None]],
             pid: int | None = PID) -> pa.Table:
    """rocprof-like kernels: no model, no iteration; (start, end, api, delay)."""
    s, e, api, delay = zip(*rows, strict=True)
    return pa.table({"pid": pa.array([pid] * len(rows), pa.int64()),
                     "start_ns": list(s), "end_ns": list(e),
                     "duration_ns": [b - a for a, b in zip(s, e, strict=True)],
                     "kernel_family": ["gemm"] * len(rows), "source": ["rocprofv3"] * len(rows),
                     "launch_api_ns": pa.array(list(api), pa.int64()),
                     "launch_delay_ns": pa.array(list(delay), pa.int64())})


# iteration 0: [B, B+1s]; iteration 1: [B+2s, B+3s]
IT0 = (0, B, B + S)
IT1 = (1, B + 2 * S, B + 3 * S)
# k1 starts inside it0 (no launch call known: its start is used);
# k2 starts after it0 ended, but its launch call started inside it0:
#   t = start - delay - api = (B+1.1s) - 0.2s - 50ns -> it0
# k3, k4 inside it1 -> it1; k5 (B+4s) and k6 (B+10s) outside every span
K12 = [(B + 100_000_000, B + 300_000_000, None, None),
       (B + 1_100_000_000, B + 1_300_000_000, 50, 200_000_000)]
K34 = [(B + 2_100_000_000, B + 2_500_000_000, None, None),
       (B + 2_600_000_000, B + 2_900_000_000, 10, 1_000)]
K5 = [(B + 4 * S, B + 4 * S + 1_000, None, None)]
K6 = [(B + 10 * S, B + 10 * S + 1_000, None, None)]


def _messages() -> dict[str, tuple[str, pa.Table]]:
    return {"k12": ("kernel_span", _kernels(K12)), "k34": ("kernel_span", _kernels(K34)),
            "it0": ("iteration_span", _spans([IT0])), "it1": ("iteration_span", _spans([IT1])),
            "k5": ("kernel_span", _kernels(K5))}


def _engine() -> Analytics:
    eng = Analytics(window_s=60.0)
    eng.ingest("graph_info", "h", pa.table({"model": ["m"], "node_count": [4], "pid": [PID]}))
    return eng


def _result(eng: Analytics) -> dict[str, object]:
    r = eng.evaluate(("h", PID, "m"))
    return {k: r.get(k) for k in ("iterations", "kernel_count", "kernels_per_iteration", "kar",
                                  "kar_source", "kernel_spans_total", "busy_ns",
                                  "launch_overhead_ns")}


@pytest.mark.parametrize("order", sorted(permutations(["k12", "k34", "it0", "it1"])))
def test_instrumented_spans_and_gpu_kernels_join_in_any_order(order: tuple[str, ...]) -> None:
    """Kernels and spans of one pid, in any order and split across messages,
    give exact per-iteration counts: it0 holds k1 (start inside) and k2 (launch
    call inside, start outside); it1 holds k3, k4. kernels/iteration = 4/2 = 2,
    KAR = 2 / 4 nodes = 0.5, kar_source instrumented_iteration."""
    eng = _engine()
    msgs = _messages()
    for name in order:
        eng.ingest(msgs[name][0], "h", msgs[name][1])
    st = eng.keys[("h", PID, "m")]
    assert (st.done[0].kernels, st.done[1].kernels) == (2, 2)
    assert eng.held_kernels() == 0  # every kernel found its span: nothing waits
    assert _result(eng) == {"iterations": 2, "kernel_count": 4, "kernels_per_iteration": 2.0,
                            "kar": 0.5, "kar_source": "instrumented_iteration",
                            "kernel_spans_total": 4,
                            # busy: 0.2s + 0.2s + 0.4s + 0.3s
                            "busy_ns": 1_100_000_000,
                            # launch: k2 50 + 0.2s, k4 10 + 1000 (k1, k3 unknown)
                            "launch_overhead_ns": 200_000_050 + 1_010}
    assert eng.drops["unattributed_kernel"] == 0


def test_kernels_outside_every_span_go_to_buckets_after_the_grace_and_are_counted() -> None:
    """k5 (B+4s, outside every span) waits while the pid's newest span ends
    within 5 s after it. Span it2 [B+9s, B+10s] (holding k6 at B+9.5s) moves
    that past B+4s+5s, so k5 goes to a time bucket of the pid's model and counts
    as unattributed_kernel: it counts to kernel_count and kernel time, not to
    KAR nor to the busy time inside iterations (the active ratio's).
    kernels/iteration = (2 + 2 + 1) / 3, KAR = that / 4 nodes."""
    eng = _engine()
    for sig, t in _messages().values():
        eng.ingest(sig, "h", t)
    assert eng.held_kernels() == 1 and eng.drops["unattributed_kernel"] == 0
    eng.ingest("kernel_span", "h", _kernels([(B + 9_500_000_000, B + 9_500_001_000, None, None)]))
    assert eng.held_kernels() == 2  # kernels alone do not make k5 late
    eng.ingest("iteration_span", "h", _spans([(2, B + 9 * S, B + 10 * S)]))
    assert eng.held_kernels() == 0 and eng.drops["unattributed_kernel"] == 1
    r = _result(eng)
    assert (r["iterations"], r["kernel_count"], r["kernels_per_iteration"], r["kar"]) == (
        3, 6, 5 / 3, 5 / 3 / 4)
    assert r["busy_ns"] == 1_100_000_000 + 1_000  # k5 is outside every iteration
    assert eng.evaluate(("h", PID, "m"))["kernel_time_ns"] == 1_100_000_000 + 2_000
    assert eng.settle() == 0 and eng.drops["unattributed_kernel"] == 1


def test_settle_resolves_what_still_waits_at_the_end_of_a_session() -> None:
    """At the end of a capture every span has arrived: settle() sends the
    kernels still held (k5, k6: no span holds them) to buckets of the pid's
    model, counted as unattributed_kernel; KAR is unchanged."""
    eng = _engine()
    for sig, t in _messages().values():
        eng.ingest(sig, "h", t)
    eng.ingest("kernel_span", "h", _kernels(K6))
    assert eng.held_kernels() == 2
    assert eng.settle() == 2 and eng.held_kernels() == 0
    assert eng.drops["unattributed_kernel"] == 2
    r = _result(eng)
    assert (r["kernel_count"], r["kernels_per_iteration"], r["kar"], r["kernel_spans_total"]) == (
        6, 2.0, 0.5, 6)
    assert list(eng.keys) == [("h", PID, "m")]


def test_held_kernels_past_the_wall_clock_grace_resolve_at_results() -> None:
    """A pid whose stream stops (no newer data) still resolves: kernels held
    longer than the grace on the wall clock go to buckets at the next results()."""
    eng = Analytics(window_s=60.0, attribution_grace_s=0.01)
    eng.ingest("kernel_span", "h", _kernels(K5))
    assert eng.held_kernels() == 1
    time.sleep(0.05)
    rows = eng.results().to_pylist()
    assert eng.held_kernels() == 0 and eng.drops["unattributed_kernel"] == 1
    assert [(r["pid"], r["model"], r["kernel_count"], r["kar_source"]) for r in rows] == [
        (PID, None, 1, None)]


def test_kernels_without_a_pid_are_not_held() -> None:
    """No pid, no join: straight to time buckets, as before."""
    eng = Analytics(window_s=60.0)
    eng.ingest("kernel_span", "h", _kernels(K5, pid=None))
    assert eng.held_kernels() == 0 and eng.evaluate(("h", -1, ""))["kernel_count"] == 1


def test_checkpoint_round_trip_keeps_held_kernels_and_the_span_index() -> None:
    """A checkpoint taken while kernels wait (and one span is indexed) restores
    them: the restored engine ends exactly like one never interrupted."""
    whole, first = _engine(), _engine()
    msgs = _messages()
    for name in ("k12", "it1", "k34", "it0", "k5"):
        whole.ingest(msgs[name][0], "h", msgs[name][1])
    for name in ("k12", "it1"):
        first.ingest(msgs[name][0], "h", msgs[name][1])
    assert first.held_kernels() == 2  # k1, k2 wait for it0
    restored = Analytics.from_dict(json.loads(json.dumps(first.to_dict())))
    assert restored.held_kernels() == 2
    for name in ("k34", "it0", "k5"):
        restored.ingest(msgs[name][0], "h", msgs[name][1])
    assert _result(restored) == _result(whole)
    assert restored.held_kernels() == whole.held_kernels() == 1  # k5
    restored.settle()
    whole.settle()
    assert _result(restored) == _result(whole)
    assert restored.drops == whole.drops


def test_kar_source_names_the_iteration_source() -> None:
    """Kernels carrying their iteration (ORT profiler, Kineto, parser-joined
    roctx) keep the direct path; kar_source follows the spans' source."""
    for source, want in (("ort", "ort_profiler"), ("kineto", "kineto"), ("roctx", "roctx"),
                         ("other", None)):
        eng = _engine()
        k = _kernels(K12).append_column("iteration", pa.array([0, 0], pa.int64())) \
            .append_column("model", pa.array(["m", "m"]))
        eng.ingest("kernel_span", "h", k)
        eng.ingest("iteration_span", "h", _spans([IT0], source=source))
        r = _result(eng)
        assert (r["kernels_per_iteration"], r["kar"], r["kar_source"]) == (2.0, 0.5, want)
        assert eng.held_kernels() == 0

"""The engine for watched processes without kernels (discovered servers):
sched-only keys, their SII and comm, and forgetting exited processes."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from stream_analytics.engine import Analytics


def _sched(pid: int, wait: int, run: int, tids: tuple[int, ...] = (), comm: str = "srv",
           ts: int | None = None) -> pa.Table:
    tids = tids or (pid,)
    n = len(tids)
    return pa.table({
        "ts_ns": [ts if ts is not None else time.time_ns()] * n, "pid": [pid] * n,
        "tid": list(tids), "comm": [comm if t == pid else "worker" for t in tids],
        "runq_wait_ns": [wait] * n, "run_ns": [run] * n, "interval_ns": [100] * n,
        "involuntary_switches": [1] * n})


def test_a_process_with_only_scheduler_samples_gets_sii_and_its_comm() -> None:
    """With sched_keys, a watched pid with no kernels or iterations has a
    result row (host, pid, model "") carrying SII = wait / interval (100 ns here) and
    its main thread's comm."""
    eng = Analytics(window_s=30, sched_keys=True)
    eng.ingest("sched_sample", "h", _sched(41, wait=25, run=75, tids=(41, 42)))
    rows = eng.results().to_pylist()
    assert [(r["host"], r["pid"], r["model"], r["comm"]) for r in rows] == [
        ("h", 41, None, "srv")]
    assert rows[0]["sii"] == pytest.approx(50 / 200)
    assert rows[0]["iterations_total"] == 0


def test_the_comm_follows_the_process_across_exec() -> None:
    """A process seen before its exec() (``aaco-exporter instrument -- python``
    between fork and exec) is renamed by the next sample: the newest comm wins."""
    eng = Analytics(window_s=30, sched_keys=True)
    eng.ingest("sched_sample", "h", _sched(41, wait=1, run=9, comm="aaco-exporter"))
    eng.ingest("sched_sample", "h", _sched(41, wait=1, run=9, comm="python3"))
    assert [r["comm"] for r in eng.results().to_pylist()] == ["python3"]


def test_without_sched_keys_scheduler_samples_alone_make_no_result() -> None:
    """Captures keep the old behaviour: no key without kernels or iterations."""
    eng = Analytics(window_s=30)
    eng.ingest("sched_sample", "h", _sched(41, wait=25, run=75))
    assert eng.results().num_rows == 0


def test_a_model_key_replaces_the_pids_sched_only_key() -> None:
    """Once iterations of a model arrive for the pid, the pid's "" key goes and
    SII is reported on the model's key."""
    eng = Analytics(window_s=30, sched_keys=True)
    eng.ingest("sched_sample", "h", _sched(41, wait=10, run=90))
    assert [k[2] for k in eng.keys] == [""]
    now = time.time_ns()
    eng.ingest("iteration_span", "h", pa.table({
        "model": ["m"], "pid": [41], "iteration": [0], "start_ns": [now - 10**9],
        "end_ns": [now], "duration_ns": [10**9]}))
    assert list(eng.keys) == [("h", 41, "m")]
    eng.ingest("sched_sample", "h", _sched(41, wait=10, run=90))
    (row,) = eng.results().to_pylist()
    assert row["model"] == "m" and row["sii"] == pytest.approx(0.1)
    assert row["comm"] == "srv"


def test_idle_keys_and_samples_are_forgotten_after_forget_s() -> None:
    """A key with no input for forget_s is dropped after its last result, with
    its scheduler samples and comm (an exited process leaves no state)."""
    eng = Analytics(window_s=30, sched_keys=True, forget_s=0.0)
    old = time.time_ns() - 10**9
    eng.ingest("sched_sample", "h", _sched(41, wait=10, run=90, ts=old))
    eng.keys[("h", 41, "")].seen_ns = old
    assert eng.results().num_rows == 1  # its last result is still published
    assert eng.keys == {} and eng.sched == {} and eng.comms == {}


def test_checkpoint_keeps_comms_and_forgetting_settings() -> None:
    """to_dict/from_dict round-trips sched_keys, forget_s and comms."""
    eng = Analytics(window_s=30, sched_keys=True, forget_s=123.0)
    eng.ingest("sched_sample", "h", _sched(41, wait=10, run=90))
    back = Analytics.from_dict(eng.to_dict())
    assert (back.sched_keys, back.forget_s, back.comms) == (True, 123.0, {("h", 41): "srv"})
    assert back.results().to_pylist()[0]["sii"] == pytest.approx(0.1)


def test_malformed_iteration_spans_are_dropped_and_counted() -> None:
    """An iteration span ending before it starts, with a negative duration or
    a negative index is dropped and counted as bad_iteration_span; the good
    rows of the same batch still count."""
    eng = Analytics(window_s=30)
    eng.ingest("iteration_span", "h", pa.table({
        "model": ["m"] * 4, "pid": [1] * 4, "iteration": [0, 1, 2, -5],
        "start_ns": [0, 100, 300, 400], "end_ns": [50, 90, 350, 450],
        "duration_ns": [50, -10, 50, 50]}))
    assert eng.drops["bad_iteration_span"] == 2
    assert eng.keys[("h", 1, "m")].iterations_total == 2

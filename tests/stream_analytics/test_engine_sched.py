"""``Analytics`` folds a SCHED_SAMPLE batch with one group-by: per pid and
sample (``ts_ns``), the same run-queue wait and wall time as
:func:`stream_analytics.sii.active_totals` over that pid's rows, the sum of its
involuntary switches, and the newest non-empty ``comm`` of its main thread; a
batch of k samples folds in as k batches of one (property tests over
synthetic batches)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter import schema
from stream_analytics.engine import Analytics
from stream_analytics.sii import active_totals

ROW = st.tuples(st.sampled_from([11, 12, 13]), st.booleans(),  # pid, main thread?
                st.integers(0, 10**6), st.integers(0, 10**6),  # runq_wait_ns, run_ns
                st.integers(0, 50), st.sampled_from([None, "", "python", "vllm"]))


def _batch(rows: list[tuple[int, bool, int, int, int, str | None]],
           ts_ns: int = 5_000) -> pa.Table:
    """One sample: every row at ``ts_ns`` (as the proc and eBPF samplers write)."""
    n = len(rows)
    cols = {name: [None] * n for name in schema.SCHED_SAMPLE.names}
    cols.update(ts_ns=[ts_ns] * n, interval_ns=[10**6] * n,
                source=["proc"] * n, pid=[r[0] for r in rows],
                tid=[r[0] if r[1] else r[0] * 100 + i for i, r in enumerate(rows)],
                comm=[r[5] for r in rows], runq_wait_ns=[r[2] for r in rows],
                run_ns=[r[3] for r in rows], voluntary_switches=[0] * n,
                involuntary_switches=[r[4] for r in rows])
    return pa.table(cols, schema=schema.SCHED_SAMPLE)


@settings(max_examples=200, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=40))
def test_sched_fold_matches_the_per_pid_reference(
        rows: list[tuple[int, bool, int, int, int, str | None]]) -> None:
    """Each pid's appended (ts, wait, wall, involuntary) equals the per-pid
    filter reference; its comm is the last truthy main-thread comm; one
    sched-only key per pid, in first-seen order."""
    t = _batch(rows)
    eng = Analytics(window_s=30.0, sched_keys=True)
    eng.ingest("sched_sample", "h", t)
    pids = list(dict.fromkeys(r[0] for r in rows))
    assert [k for k in eng.keys] == [("h", p, "") for p in pids]
    for p in pids:
        sub = t.filter(pc.equal(t.column("pid"), p))
        wait, wall = active_totals(sub)
        invol = sum(r[4] for r in rows if r[0] == p)
        assert list(eng.sched[("h", p)]) == [(5_000, wait, wall, invol)]
        comm = next((r[5] for r in reversed(rows) if r[0] == p and r[1] and r[5]), None)
        assert eng.comms.get(("h", p)) == comm


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(ROW, min_size=1, max_size=12), min_size=1, max_size=6))
def test_a_batch_of_k_samples_folds_in_as_k_single_sample_batches(
        samples: list[list[tuple[int, bool, int, int, int, str | None]]]) -> None:
    """``run --publish-interval`` concatenates k samples (ts 5000, 6000, ...)
    into one batch: the engine then holds the same per-pid entries (one per
    sample, in ts order), comms, keys and SII as after k single-sample batches."""
    parts = [_batch(rows, ts_ns=5_000 + 1_000 * i) for i, rows in enumerate(samples)]
    one, many = Analytics(window_s=30.0, sched_keys=True), Analytics(window_s=30.0,
                                                                       sched_keys=True)
    one.ingest("sched_sample", "h", pa.concat_tables(parts))
    for t in parts:
        many.ingest("sched_sample", "h", t)
    assert list(one.keys) == list(many.keys)
    assert {k: list(v) for k, v in one.sched.items()} == {k: list(v)
                                                        for k, v in many.sched.items()}
    assert one.comms == many.comms
    for pid in {r[0] for rows in samples for r in rows}:
        assert len(one.sched[("h", pid)]) == sum(any(r[0] == pid for r in rows)
                                                 for rows in samples)
        for lo in (0, 5_500, 5_000 + 1_000 * (len(samples) - 1)):  # window edges by ts
            a: dict[str, object] = {}
            b: dict[str, object] = {}
            one._sii(a, "h", pid, lo)
            many._sii(b, "h", pid, lo)
            assert a == b

"""PublishBuffer: which collector outputs wait for the publish tick, how held
samples come out (concatenated or as they were), and the bound."""

from __future__ import annotations

import pyarrow as pa
import pytest

from collectors.base import Emit
from exporter import schema
from exporter.publish_buffer import PublishBuffer


def _gauge(ts: int, value: float = 1.0) -> pa.Table:
    return pa.table({"ts_ns": [ts, ts], "metric": ["hw.gpu.power", "hw.gpu.temperature"],
                     "value": [value, 40.0], "kind": ["gauge"] * 2, "unit": ["W", "Cel"],
                     "source": ["rocm-smi"] * 2, "gpu_index": [0, 0]})


def _procs(ts: int, pids: list[int]) -> pa.Table:
    return pa.table({"ts_ns": [ts] * len(pids), "pid": pids, "comm": ["x"] * len(pids),
                     "reason": ["comm"] * len(pids), "create_ns": [0] * len(pids)})


def _iters(n: int) -> pa.Table:
    return pa.table({"start_ns": [0] * n, "end_ns": [1] * n, "duration_ns": [1] * n,
                     "source": ["ort"] * n, "model": ["m"] * n, "pid": [1] * n,
                     "iteration": list(range(n)), "kernel_count": [0] * n})


def test_first_sample_passes_then_samples_wait_and_come_out_as_one_batch() -> None:
    """The first gauge sample of a collector passes at once; the next four are
    held and drained as one gauge_sample batch of their 8 rows in collect order,
    id '<first key>+4'; the buffer is then empty."""
    buf = PublishBuffer()
    first = buf.take("gpu", [Emit("gauge_sample", _gauge(1), "g:0")])
    assert [(e.signal, e.key, e.batch.num_rows) for e in first] == [("gauge_sample", "g:0", 2)]
    for i in range(1, 5):
        assert buf.take("gpu", [Emit("gauge_sample", _gauge(i + 1, float(i)), f"g:{i}")]) == []
    assert len(buf) == 4 and buf.held == {"gauge_sample": 4}
    (out,) = buf.drain()
    assert (out.signal, out.key) == ("gauge_sample", "g:1+4")
    assert out.batch.column("ts_ns").to_pylist() == [2, 2, 3, 3, 4, 4, 5, 5]
    assert schema.conform("gauge_sample", out.batch).num_rows == 8
    assert len(buf) == 0 and buf.drain() == []


def test_snapshots_pass_at_once() -> None:
    """process_info snapshots (the whole set of the host each) are never held:
    every one, an empty one included, passes as it came."""
    buf = PublishBuffer()
    for i, pids in enumerate(([5], [5, 6], [])):
        out = buf.take("discovery", [Emit("process_info", _procs(i, pids), f"d:{i}")])
        assert [(e.key, e.batch.num_rows) for e in out] == [(f"d:{i}", len(pids))]
    assert len(buf) == 0


def test_spans_and_every_output_of_a_call_carrying_spans_pass_at_once() -> None:
    """iteration_span never waits, and neither does a gauge emitted in the same
    collect() as spans (the attach collector's duty cycle), even after the
    first sample of that collector was seen."""
    buf = PublishBuffer()
    buf.take("attach", [Emit("gauge_sample", _gauge(1), "a:0")])
    call = [Emit("iteration_span", _iters(3), "a:1:k"), Emit("gauge_sample", _gauge(2), "a:1:d")]
    assert buf.take("attach", call) == call
    assert buf.take("ort", [Emit("iteration_span", _iters(2), "o:0")])[0].key == "o:0"
    assert len(buf) == 0


def test_collectors_are_held_apart() -> None:
    """Two collectors' samples of one signal come out as two batches, one each."""
    buf = PublishBuffer()
    for c in ("gpu", "attach2"):
        buf.take(c, [Emit("gauge_sample", _gauge(1), f"{c}:0")])
        buf.take(c, [Emit("gauge_sample", _gauge(2), f"{c}:1")])
        buf.take(c, [Emit("gauge_sample", _gauge(3), f"{c}:2")])
    assert sorted((e.key, e.batch.num_rows) for e in buf.drain()) == [
        ("attach2:1+2", 4), ("gpu:1+2", 4)]


def test_a_full_buffer_is_released_at_once_and_counted() -> None:
    """With max_batches=3 the third held sample releases the three as one
    batch (counted in early); nothing is dropped."""
    buf = PublishBuffer(max_batches=3)
    buf.take("gpu", [Emit("gauge_sample", _gauge(0), "g:0")])
    got = [buf.take("gpu", [Emit("gauge_sample", _gauge(i), f"g:{i}")]) for i in (1, 2, 3)]
    assert got[:2] == [[], []]
    assert [(e.key, e.batch.num_rows) for e in got[2]] == [("g:1+3", 6)]
    assert buf.early == {"gauge_sample": 1} and len(buf) == 0


def test_a_sample_outside_its_schema_raises_and_holds_nothing() -> None:
    """A gauge batch without its required 'value' column raises SchemaError
    naming the field; the buffer holds nothing of that call."""
    buf = PublishBuffer()
    buf.take("gpu", [Emit("gauge_sample", _gauge(1), "g:0")])
    with pytest.raises(schema.SchemaError, match="value"):
        buf.take("gpu", [Emit("gauge_sample", _gauge(2).drop_columns(["value"]), "g:1")])
    assert len(buf) == 0

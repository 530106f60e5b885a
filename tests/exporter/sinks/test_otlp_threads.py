"""OtlpSink's span buffer is shared by ingest (event loop) and flush (a worker
thread, asyncio.to_thread): hammered from two threads, every kernel and
iteration row is exported exactly once (counts and identities)."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from exporter.sinks.otlp import OtlpConfig, OtlpSink
from tests.support import load_path as _load

HERE = Path(__file__).parent
data = _load("aaco_sink_testdata", HERE / "testdata" / "sinkdata.py")

COPIES = 60


def _shift(t: pa.Table, it_off: int, ns_off: int) -> pa.Table:
    for col, off in (("iteration", it_off), ("start_ns", ns_off), ("end_ns", ns_off)):
        i = t.schema.get_field_index(col)
        t = t.set_column(i, col, pc.add(t[col], pa.scalar(off, t[col].type)))
    return t


class RecordingSink(OtlpSink):
    """The real buffer logic; the export records row identities instead of spans."""

    def __init__(self, config: OtlpConfig) -> None:
        super().__init__(config)
        self.kernel_ids: Counter[tuple[int, int]] = Counter()
        self.iteration_ids: Counter[int] = Counter()
        self._rec = threading.Lock()

    def _export_spans(self, host: str, ks: pa.Table, its: pa.Table) -> None:
        with self._rec:
            self.kernel_ids.update(zip(ks["iteration"].to_pylist(), ks["start_ns"].to_pylist(),
                                       strict=True))
            self.iteration_ids.update(its["iteration"].to_pylist())


@pytest.fixture
def fast_switching() -> object:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # interleave the two threads as often as possible
    yield None
    sys.setswitchinterval(old)


def test_ingest_and_flush_from_two_threads_lose_and_double_nothing(
        fast_switching: object) -> None:
    """60 copies of 6 magika iterations ingested in small batches on one thread
    (ingest also emits when batch_rows fill) while another flushes in a loop;
    after close() each kernel row and iteration row was exported once."""
    ks, its = data.magika_tables()
    n_it = its.num_rows
    span = int(pc.max(its["end_ns"]).as_py()) - int(pc.min(its["start_ns"]).as_py()) + 1
    sink = RecordingSink(OtlpConfig(endpoint="127.0.0.1:1", insecure=True, batch_rows=200))
    done = threading.Event()
    flushes = 0

    def flusher() -> None:
        nonlocal flushes
        while not done.is_set():
            sink.flush()
            flushes += 1

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for c in range(COPIES):
            k, it = _shift(ks, c * n_it, c * span), _shift(its, c * n_it, c * span)
            for b in k.to_batches(max_chunksize=37):
                sink.ingest("kernel_span", b, "node-1")
            for b in it.to_batches(max_chunksize=2):
                sink.ingest("iteration_span", b, "node-1")
    finally:
        done.set()
        t.join()
    sink.close()
    assert flushes > 0
    assert sum(sink.kernel_ids.values()) == COPIES * ks.num_rows
    assert len(sink.kernel_ids) == COPIES * ks.num_rows  # distinct: none doubled
    assert set(sink.kernel_ids.values()) == {1}
    assert sink.iteration_ids == Counter(range(COPIES * n_it))

"""The Prometheus sink on batches of several samples (``run
--publish-interval``): a gauge series shows its newest sample by ``ts_ns``,
and a batch of k samples renders exactly as k single-sample batches. Gauges:
the real MI250 rocm-smi snapshot (collectors/gpu/testdata/PROVENANCE.md),
power scaled per sample so each sample's value differs."""

from __future__ import annotations

import pyarrow as pa
from prometheus_client import CollectorRegistry, generate_latest

from exporter import schema
from exporter.sinks.prometheus import PromState
from tests.stream_analytics.test_verdicts import _snapshot


def _exposition(state: PromState) -> str:
    reg = CollectorRegistry()
    reg.register(state)
    return generate_latest(reg).decode()


def _samples(n: int) -> list[pa.RecordBatch]:
    return [schema.conform("gauge_sample", _snapshot(1_000 + i, 1.0 + 0.1 * i))
            for i in range(n)]


def _power(text: str) -> list[str]:
    return sorted(ln for ln in text.splitlines() if ln.startswith("hw_gpu_power_watts{"))


def _sched(ts: int, pid: int, wait: int, comm: str) -> pa.Table:
    cols = {name: [None] for name in schema.SCHED_SAMPLE.names}
    cols.update(ts_ns=[ts], interval_ns=[10**9], source=["proc"], pid=[pid], tid=[pid],
                comm=[comm], runq_wait_ns=[wait], run_ns=[2 * wait], voluntary_switches=[3],
                involuntary_switches=[1], migrations=[1], minor_faults=[4], major_faults=[0],
                runq_hist_log2_ns=[[0, wait % 5, 1]])
    return pa.table(cols, schema=schema.SCHED_SAMPLE)


def test_a_batch_of_k_samples_renders_as_k_single_sample_batches() -> None:
    """5 GPU samples and 5 scheduler samples in one batch each give the same
    exposition, byte for byte, as 5 single-sample batches of each."""
    gauges = _samples(5)
    sched = [_sched(1_000 + i, 42, 1000 * (i + 1), f"srv{i}") for i in range(5)]
    one, many = PromState(), PromState()
    one.ingest("gauge_sample", "node1", pa.Table.from_batches(gauges).combine_chunks()
               .to_batches()[0])
    one.ingest("sched_sample", "node1", pa.concat_tables(sched).combine_chunks().to_batches()[0])
    for g, s in zip(gauges, sched, strict=True):
        many.ingest("gauge_sample", "node1", g)
        many.ingest("sched_sample", "node1", s.to_batches()[0])
    assert _exposition(one) == _exposition(many)
    assert 'comm="srv4"' in _exposition(one)  # the newest sample's comm
    assert 'aaco_sched_runqueue_wait_seconds_total{comm="srv4",host="node1",pid="42"} 1.5e-05' \
        in _exposition(one)  # 1+2+3+4+5 us


def test_a_gauge_series_shows_its_newest_sample_by_ts_ns() -> None:
    """The same 3 samples in reverse row order: every power series shows the
    last sample's value (power x 1.2), as when they arrive in time order."""
    gauges = _samples(3)
    newest = PromState()
    newest.ingest("gauge_sample", "node1", gauges[-1])
    reverse = PromState()
    reverse.ingest("gauge_sample", "node1",
                   pa.Table.from_batches(gauges[::-1]).combine_chunks().to_batches()[0])
    assert _power(_exposition(reverse)) == _power(_exposition(newest))
    first = PromState()
    first.ingest("gauge_sample", "node1", gauges[0])
    assert _power(_exposition(newest)) != _power(_exposition(first))


def _power_rows(values: list[float], attrs: list[list[tuple[str, str]]]) -> pa.RecordBatch:
    n = len(values)
    return schema.conform("gauge_sample", pa.table({
        "ts_ns": list(range(1, n + 1)), "metric": ["hw.gpu.power"] * n, "value": values,
        "kind": ["gauge"] * n, "unit": ["W"] * n, "source": ["rocm-smi"] * n,
        "gpu_index": [0] * n, "gpu_uuid": [None] * n,
        "attributes": pa.array(attrs, pa.map_(pa.string(), pa.string()))}))


def test_a_nan_newest_reading_keeps_the_older_value_and_counts_every_nan() -> None:
    """Samples 300 W, NaN, 310 W, NaN of one series in one batch: the series
    shows 310 W (its newest finite reading) and both NaN rows are counted as
    ``gauge_nan`` drops, as when the four arrive one batch each."""
    vals = [300.0, float("nan"), 310.0, float("nan")]
    attrs = [[("sensor", "average")]] * 4
    one, many = PromState(), PromState()
    one.ingest("gauge_sample", "n", _power_rows(vals, attrs))
    for v in vals:
        many.ingest("gauge_sample", "n", _power_rows([v], attrs[:1]))
    assert _power(_exposition(one)) == _power(_exposition(many))
    assert _power(_exposition(one))[0].endswith(" 310.0")
    assert one.drops["gauge_nan"] == many.drops["gauge_nan"] == 2


def test_two_raw_series_with_one_exposition_name_show_the_newest_row() -> None:
    """Attributes ``a.b`` and ``a_b`` both become label ``a_b``: the newer row
    (by ``ts_ns``) gives the value, in a batch as in separate batches."""
    vals, attrs = [1.0, 2.0, 3.0], [[("a.b", "x")], [("a_b", "x")], [("a.b", "x")]]
    for order in ([0, 1, 2], [2, 1, 0]):
        one = PromState()
        b = _power_rows([vals[i] for i in order], [attrs[i] for i in order])
        ts = pa.array([i + 1 for i in order], pa.int64())
        one.ingest("gauge_sample", "n", b.set_column(0, "ts_ns", ts))
        assert [ln.rsplit(" ", 1)[1] for ln in _power(_exposition(one))] == ["3.0"]


def test_alike_samples_are_read_from_the_newest_alone() -> None:
    """5 real GPU samples naming the same series in the same order: only the
    newest sample's rows are turned into Python values (the older rows would
    only be skipped); a batch whose older sample names a series the newest
    lacks is read whole, so that series still shows its value."""
    from exporter.sinks.prometheus import _newest_sample_when_alike

    gauges = [schema.plain(g) for g in _samples(5)]
    batch = pa.Table.from_batches(gauges).combine_chunks().to_batches()[0]
    ts = batch.column("ts_ns").to_numpy()
    newest = _newest_sample_when_alike(batch, ts)
    assert newest.equals(gauges[-1])
    extra = _power_rows([123.0], [[("sensor", "extra")]]).set_column(
        0, "ts_ns", pa.array([1_000], pa.int64()))
    mixed_tables = [pa.Table.from_batches([schema.plain(extra)]).cast(
        pa.Table.from_batches([gauges[0]]).schema), *[pa.Table.from_batches([g]) for g in gauges]]
    mixed = pa.concat_tables(mixed_tables).combine_chunks().to_batches()[0]
    assert _newest_sample_when_alike(mixed, mixed.column("ts_ns").to_numpy()) is mixed
    state = PromState()
    state.ingest("gauge_sample", "node1", mixed)
    assert any('sensor="extra"' in ln and ln.endswith(" 123.0")
               for ln in _power(_exposition(state)))


def test_samples_of_equal_size_naming_other_series_are_read_whole() -> None:
    """An older sample as wide as the newest but naming its series in another
    order is not taken as alike: the batch is read whole, and renders as the
    samples one batch each."""
    from exporter.sinks.prometheus import _newest_sample_when_alike

    gauges = [schema.plain(g) for g in _samples(3)]
    oldest = gauges[0].take(pa.array(range(gauges[0].num_rows - 1, -1, -1)))
    batch = pa.Table.from_batches([oldest, *gauges[1:]]).combine_chunks().to_batches()[0]
    assert _newest_sample_when_alike(batch, batch.column("ts_ns").to_numpy()) is batch
    one, many = PromState(), PromState()
    one.ingest("gauge_sample", "node1", batch)
    for g in (oldest, *gauges[1:]):
        many.ingest("gauge_sample", "node1", g)
    assert _exposition(one) == _exposition(many)

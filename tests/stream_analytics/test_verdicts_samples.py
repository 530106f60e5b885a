"""OnlineVerdicts on batches of several GPU samples (``run --publish-interval``):
the gauge window counts samples (distinct ``ts_ns``), not messages, so a batch
of k samples gives the same drift status, classifier features and verdicts as
k single-sample batches. Data: the real MI250 rocm-smi snapshot (see
collectors/gpu/testdata/PROVENANCE.md), package power scaled per sample."""

from __future__ import annotations

import pyarrow as pa

from exporter.schema import ANALYTICS_RESULT, conform
from stream_analytics.bottleneck import PartPicks, gauge_parts, gauge_parts_split
from stream_analytics.verdicts import OnlineVerdicts
from tests.stream_analytics.test_verdicts import _snapshot

RESULT = pa.Table.from_pylist([{"ts_ns": 10**6, "host": "node1", "model": "m", "kar": 1.0}],
                              schema=ANALYTICS_RESULT)


def _samples(n: int) -> list[pa.Table]:
    """``n`` snapshots at ts 1000, 1001, ...; power 1.00x, 1.01x, ... of the recording,
    each in GAUGE_SAMPLE's schema as the pipeline holds them."""
    return [pa.Table.from_batches([conform("gauge_sample", _snapshot(1_000 + i, 1.0 + 0.01 * i))])
            for i in range(n)]


def _outcome(ov: OnlineVerdicts) -> tuple[list[dict[str, object]], list[dict[str, object]],
                                          dict[str, float]]:
    feats = ov._host_gauge_features("node1")
    drift, verdicts = ov.update(RESULT)
    return drift.to_pylist(), verdicts.to_pylist(), feats


def test_a_batch_of_k_gpu_samples_gives_the_verdicts_of_k_single_batches() -> None:
    """40 samples as 8 batches of 5 vs 40 batches of 1: identical drift status
    rows (samples counted per reading), identical features and verdict."""
    samples = _samples(40)
    single, batched = OnlineVerdicts(), OnlineVerdicts()
    for t in samples:
        single.ingest_gauges("node1", t)
    for i in range(0, 40, 5):
        batched.ingest_gauges("node1", pa.concat_tables(samples[i:i + 5]))
    want, got = _outcome(single), _outcome(batched)
    assert got == want
    assert {r["samples"] for r in got[0] if str(r["stream"]).startswith("gpu_")} == {40}
    assert len(got[1]) == 1 and got[2]["power_cap_ratio"] > 0  # features were read


def test_the_gauge_window_holds_the_last_30_samples_whatever_the_batching() -> None:
    """With 40 samples in 8 batches of 5, the classifier's power_cap_ratio is
    the mean over the last 30 samples only: the same as the last 30 samples
    ingested one by one, and not the mean over all 40."""
    samples = _samples(40)
    batched, last30, all40 = OnlineVerdicts(), OnlineVerdicts(), OnlineVerdicts(
        gauge_batches=40)
    for i in range(0, 40, 5):
        batched.ingest_gauges("node1", pa.concat_tables(samples[i:i + 5]))
    for t in samples[10:]:
        last30.ingest_gauges("node1", t)
    for t in samples:
        all40.ingest_gauges("node1", t)
    got = batched._host_gauge_features("node1")
    assert len(batched._gauges["node1"]) == 30
    assert got == last30._host_gauge_features("node1")
    assert got["power_cap_ratio"] != all40._host_gauge_features("node1")["power_cap_ratio"]


def test_gauge_parts_split_equals_one_gauge_parts_call_per_sample() -> None:
    """gauge_parts_split of 4 concatenated real samples gives, per sample and
    part, the rows gauge_parts gives for that sample alone."""
    samples = _samples(4)
    t = pa.concat_tables(samples)
    bounds = [0]
    for s in samples:
        bounds.append(bounds[-1] + s.num_rows)
    got = gauge_parts_split(t, bounds)
    want = [gauge_parts(s) for s in samples]
    assert len(got) == 4
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for part in w:
            assert g[part].to_pylist() == w[part].to_pylist()
    assert sum(g["power"].num_rows for g in got) > 0


def test_part_picks_are_reused_for_alike_tables_and_redone_for_others() -> None:
    """With a :class:`PartPicks`, batches of real samples naming the same series
    reuse the first batch's row picks (``reused`` counts them) and give the
    same part tables as without; a batch naming other series (the first
    sample's rows reversed) is picked anew, and still gives the same tables."""
    def bounds(samples: list[pa.Table]) -> list[int]:
        out = [0]
        for s in samples:
            out.append(out[-1] + s.num_rows)
        return out

    picks = PartPicks()
    for start in (0, 2, 4):
        samples = _samples(6)[start:start + 2]
        t = pa.concat_tables(samples)
        got = gauge_parts_split(t, bounds(samples), picks)
        want = gauge_parts_split(t, bounds(samples))
        assert [{k: v.to_pylist() for k, v in g.items()} for g in got] == \
            [{k: v.to_pylist() for k, v in w.items()} for w in want]
    assert picks.reused == 2
    other = [_samples(1)[0].take(pa.array(range(_samples(1)[0].num_rows - 1, -1, -1)))]
    t = pa.concat_tables(other)
    got, want = gauge_parts_split(t, bounds(other), picks), gauge_parts_split(t, bounds(other))
    assert [{k: v.to_pylist() for k, v in g.items()} for g in got] == \
        [{k: v.to_pylist() for k, v in w.items()} for w in want]
    assert picks.reused == 2
    assert sum(g["power"].num_rows for g in got) > 0


def test_part_picks_are_kept_per_batch_length() -> None:
    """Batches of 2, 3, 2 and 3 real samples (a publish interval catching one
    poll more or less): the third and fourth reuse the picks of the batch of
    their length; the tables equal those picked without a memo."""
    picks = PartPicks()
    samples = _samples(10)
    start = 0
    for k in (2, 3, 2, 3):
        batch = samples[start:start + k]
        start += k
        t = pa.concat_tables(batch)
        bounds = [0]
        for s in batch:
            bounds.append(bounds[-1] + s.num_rows)
        got, want = gauge_parts_split(t, bounds, picks), gauge_parts_split(t, bounds)
        assert [{p: v.to_pylist() for p, v in g.items()} for g in got] == \
            [{p: v.to_pylist() for p, v in w.items()} for w in want]
    assert picks.reused == 2

"""OnlineVerdicts: drift status per host (results and GPU gauges) and verdict rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from collectors.gpu.rocm_smi import parse_rocm_smi
from collectors.gpu.rows import to_table
from exporter.schema import ANALYTICS_RESULT
from stream_analytics import thresholds as T
from stream_analytics.bottleneck import CPU_RECOMMENDATIONS, RECOMMENDATIONS
from stream_analytics.verdicts import OnlineVerdicts

SMI = (Path(__file__).resolve().parents[2] / "collectors" / "gpu" / "testdata" / "smi"
       / "wandb" / "mi250_rocm_smi_all.json")  # real rocm-smi output, see PROVENANCE.md there
NO_RESULTS = ANALYTICS_RESULT.empty_table()


def _snapshot(ts_ns: int, power_scale: float = 1.0) -> pa.Table:
    """GAUGE_SAMPLE rows of the real MI250 snapshot at ``ts_ns``; power x ``power_scale``."""
    res = parse_rocm_smi(SMI.read_text(), str(SMI))
    t = pa.Table.from_batches([to_table(res.rows, ts_ns=ts_ns, source="rocm-smi")])
    if power_scale != 1.0:
        is_p = pa.compute.equal(t.column("metric").cast(pa.string()), "hw.gpu.power")
        v = pa.compute.if_else(is_p, pa.compute.multiply(t.column("value"), power_scale),
                               t.column("value"))  # fmt: skip
        t = t.set_column(t.schema.get_field_index("value"), "value", v)
    return t


def test_gpu_gauges_of_a_host_without_results_publish_power_and_clock_drift_status() -> None:
    """A host that only sends GPU gauges (real rocm-smi MI250 snapshot) gets
    DRIFT_STATUS rows on the next update even with no analytics result: one
    series per power sensor and per clock domain, counted per snapshot; then
    nothing is pending."""
    ov = OnlineVerdicts()
    assert not ov.pending
    for i in range(3):
        ov.ingest_gauges("node1", _snapshot(1_000 + i))
    assert ov.pending
    drift, verdicts = ov.update(NO_RESULTS)
    assert verdicts.num_rows == 0 and not ov.pending
    rows = drift.to_pylist()
    assert {r["host"] for r in rows} == {"node1"}
    assert {(r["stream"], r["key"]) for r in rows} == {
        ("gpu_power", "0/average"), ("gpu_clock", "0/sclk"), ("gpu_clock", "0/mclk"),
        ("gpu_clock", "0/fclk"), ("gpu_clock", "0/socclk")}  # fmt: skip
    assert {r["samples"] for r in rows} == {3} and {r["ts_ns"] for r in rows} == {1_002}


def test_a_power_step_raises_gpu_power_drift_and_leaves_clocks_alone() -> None:
    """After the grace period of identical real snapshots, +20% package power
    fires the gpu_power detectors of that host; the clock series stay quiet."""
    ov = OnlineVerdicts()
    n = T.DRIFT_GRACE_PERIOD
    for i in range(n):
        ov.ingest_gauges("node1", _snapshot(i))
    for i in range(n, n + 10):
        ov.ingest_gauges("node1", _snapshot(i, power_scale=1.2))
    drift, _ = ov.update(NO_RESULTS)
    fired = {(r["stream"], r["detector"]) for r in drift.to_pylist() if r["drift_events_total"]}
    assert ("gpu_power", "cusum") in fired and ("gpu_power", "ewma") in fired
    assert not {s for s, _ in fired} - {"gpu_power"}


def test_status_rows_are_for_the_hosts_this_update_touched() -> None:
    """Results of host a publish a's streams only, though b has streams too."""
    ov = OnlineVerdicts()
    ov.ingest_gauges("b", _snapshot(1))
    ov.update(NO_RESULTS)
    res = pa.Table.from_pylist([{"ts_ns": 5, "host": "a", "model": "m", "kar": 1.0}],
                               schema=ANALYTICS_RESULT)  # fmt: skip
    drift, verdicts = ov.update(res)
    assert {r["host"] for r in drift.to_pylist()} == {"a"}
    assert verdicts.column("host").to_pylist() == ["a"]


R9700 = SMI.parents[1] / "rocm_smi_exporter" / "rocm_smi_all.json"  # real, card1 throttled


def test_online_verdict_reads_real_smi_gauges_of_the_host() -> None:
    """The real R9700 rocm-smi snapshot (card1 throttle_status 16384, both cards at
    100% GPU use) reaches the classifier through ingest_gauges: a result of that
    host without any kernel data is labelled throttled, with throttle residency,
    gfx activity and power-cap evidence read from the collector's metric names."""
    res = parse_rocm_smi(R9700.read_text(), str(R9700))
    ov = OnlineVerdicts()
    ov.ingest_gauges("gpu-node", pa.Table.from_batches([to_table(res.rows, ts_ns=1,
                                                                 source="rocm-smi")]))
    row = pa.Table.from_pylist([{"ts_ns": 2, "host": "gpu-node", "model": "m"}],
                               schema=ANALYTICS_RESULT)  # fmt: skip
    _, verdicts = ov.update(row)
    (v,) = verdicts.to_pylist()
    assert v["label"] == "throttled", v
    signals = {e["signal"]: e["value"] for e in json.loads(v["evidence_json"])}
    assert signals["throttle_residency"] == 0.5  # 1 of 2 cards throttled
    assert signals["power_cap_ratio"] == (276 + 300) / 2 / 300


def test_verdict_recommendation_follows_the_results_device_type() -> None:
    """Two keys with the same signals (micro kernels, high launch tax): the one
    whose process ran GPU kernels gets the GPU advice, the CPU-only one (ORT
    CPU EP) the CPU advice, with the same label."""
    rows = [{"ts_ns": 1, "host": "h", "model": "m", "pid": pid, "kernel_count": 100,
             "micro_kernel_count": 95, "launch_tax": 2.0, "gpu_active_ratio": 0.3,
             "kernel_spans_total": 100, "iterations_total": 0, "device_type": dev}
            for pid, dev in ((1, "gpu"), (2, "cpu"))]
    _, verdicts = OnlineVerdicts().update(pa.Table.from_pylist(rows, schema=ANALYTICS_RESULT))
    by_pid = {v["pid"]: v for v in verdicts.to_pylist()}
    assert by_pid[1]["label"] == by_pid[2]["label"] == "launch-bound"
    assert by_pid[1]["recommendation"] == RECOMMENDATIONS["launch-bound"]
    assert by_pid[2]["recommendation"] == CPU_RECOMMENDATIONS["launch-bound"]

"""HEU = achieved FLOP/s over iterations / calibrated peak (exporter/heu.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from collectors.ort.flops import GraphFlops
from exporter import schema
from exporter.heu import heu_metrics

EXE = str(Path(sys.executable).parent / "aaco-exporter")
CAL = {"format": "aaco-calibration", "version": 1,
       "ceilings": {"cpu_peak_flops_float32": 1e9, "cpu_peak_flops_float64": 5e8,
                    "cpu_memory_bandwidth": 1e10}}


def _kernels(rows: list[tuple[str, int, int]]) -> pa.Table:
    """(op_type, iteration, duration_ns) CPU kernel spans."""
    n = len(rows)
    cols = {f.name: pa.nulls(n, f.type) for f in schema.KERNEL_SPAN}
    cols.update(start_ns=pa.array([0] * n, pa.int64()), end_ns=pa.array([0] * n, pa.int64()),
                duration_ns=pa.array([r[2] for r in rows], pa.int64()),
                iteration=pa.array([r[1] for r in rows], pa.int64()))
    for k, v in (("source", ["ort"] * n), ("device_type", ["cpu"] * n),
                 ("kernel_name", [r[0] for r in rows]), ("kernel_family", ["x"] * n),
                 ("op_type", [r[0] for r in rows]), ("model", ["m"] * n)):
        cols[k] = pa.array(v).dictionary_encode().cast(schema.KERNEL_SPAN.field(k).type)
    return pa.table(cols, schema=schema.KERNEL_SPAN)


def test_heu_is_graph_flops_times_iterations_over_kernel_time_over_peak() -> None:
    """2 iterations x 1e6 FLOPs in 4 ms of kernels = 5e8 FLOP/s = HEU 0.5 of a
    1e9 peak; the MatMul alone: 2 x 9e5 FLOPs in 2 ms = 0.9."""
    k = _kernels([("MatMul", 0, 1_000_000), ("Add", 0, 1_000_000),
                  ("MatMul", 1, 1_000_000), ("Add", 1, 1_000_000)])
    it = pa.table({"duration_ns": pa.array([2_500_000, 2_500_000], pa.int64())})
    f = GraphFlops(total=1_000_000, matmul_conv=900_000)
    d = heu_metrics(k, it, f, "float32", CAL, Path("cal.json"))
    assert d["heu"] == pytest.approx(0.5) and d["heu_matmul_conv"] == pytest.approx(0.9)
    assert d["heu_latency"] == pytest.approx(0.4)
    assert d["heu_inputs"]["iterations"] == 2 and d["heu_inputs"]["kernel_time_ns"] == 4_000_000
    assert d["heu_inputs"]["ceiling"] == "cpu_peak_flops_float32" and "heu_note" not in d


def test_without_a_calibration_heu_is_none_and_says_to_calibrate() -> None:
    """No calibration: heu None, its inputs still there, one line naming the command."""
    d = heu_metrics(_kernels([("MatMul", 0, 10)]), pa.table({"duration_ns": [10]}),
                    GraphFlops(total=100), "float32", None, Path("/x/cal.json"))
    assert d["heu"] is None and d["heu_inputs"]["graph_flops_per_iteration"] == 100
    assert d["heu_note"] == ("HEU needs `aaco-exporter calibrate` (no calibration of this "
                             "host at /x/cal.json)")


@pytest.mark.slow
def test_capture_writes_heu_from_its_own_kernels_and_the_calibration(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """A magika capture with a calibration: derived_metrics.json's heu equals
    738272013 FLOPs x iterations / the kernel time in kernels.parquet / the
    float32 peak in the calibration file; without one it says to calibrate."""
    cal = tmp_path / "cal.json"
    r = subprocess.run([EXE, "calibrate", "--calibration", str(cal), "--gemm-n", "256",
                        "--reps", "2", "--stream-mib", "4"], env=cli_env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    peak = json.loads(cal.read_text())["ceilings"]["cpu_peak_flops_float32"]
    args = [EXE, "capture", "--model", "magika", "--iterations", "6", "--warmup", "1",
            "--out", str(tmp_path / "s"), "--quiet"]
    r = subprocess.run([*args, "--calibration", str(cal)], env=cli_env, capture_output=True,
                       text=True, timeout=240, check=False)
    assert r.returncode == 0, r.stderr
    out = Path(r.stdout.strip().splitlines()[-1])
    d = json.loads((out / "metrics/derived_metrics.json").read_text())
    k = pq.read_table(out / "profiler/kernels.parquet")
    kt = pc.sum(k["duration_ns"]).as_py()
    assert d["heu_inputs"]["graph_flops_per_iteration"] == 738_272_013
    assert d["heu_inputs"]["iterations"] == 6 and d["heu_inputs"]["kernel_time_ns"] == kt
    assert d["heu"] == pytest.approx(738_272_013 * 6 / (kt / 1e9) / peak, rel=1e-9)
    assert "HEU  (FLOP/s / peak)" in r.stdout
    r = subprocess.run([*args, "--iterations", "2", "--calibration", str(tmp_path / "none")],
                       env=cli_env, capture_output=True, text=True, timeout=240, check=False)
    assert r.returncode == 0, r.stderr
    assert "HEU needs `aaco-exporter calibrate`" in r.stdout

"""Roofline placement from hardware counters (exporter/roofline.py) on real
rocprof-compute and rocprofv3 counter files, and roofline.json in a replay bundle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from collectors.rocprof.counters import read_counters
from exporter.roofline import gpu_ceilings, roofline

DATA = Path(__file__).resolve().parents[1] / "collectors/rocprof/testdata"
EXE = str(Path(sys.executable).parent / "aaco-exporter")


def test_mi200_vcopy_is_memory_bound_with_bytes_from_the_tcc_ea_counters() -> None:
    """vcopy (MI200): no FLOPs; HBM bytes = 32*RD32B + 64*(RD-RD32B) + 64*WR64B
    + 32*(WR-WR64B) summed over 3 dispatches; ceilings from its roofline.csv
    (device 0: 1388.9302 GB/s, FP32 20941.971 GFLOP/s); AI 0 -> memory-bound."""
    t = read_counters([DATA / "rocprof_compute_MI200"])
    assert t is not None
    ceil = gpu_ceilings(t, None)
    assert ceil is not None and "roofline.csv" in ceil["source"]
    assert ceil["hbm_bytes_per_s"] == pytest.approx(1388.9302e9)
    assert ceil["peak_flops_per_s"]["valu_f32"] == pytest.approx(20941.971e9)
    r = roofline(t, ceil)
    (fam,) = r["families"]
    rd, wr, wr64 = [131086, 131086, 131087], [131072, 91072, 91113], [131072, 91072, 91113]
    want = sum(64 * a + 64 * c + 32 * (b - c) for a, b, c in zip(rd, wr, wr64, strict=True))
    assert fam["name"] == "copy" and fam["dispatches"] == 3
    assert fam["hbm_bytes"] == want and fam["flops"] == 0.0
    assert fam["arithmetic_intensity"] == 0.0 and fam["bound"] == "memory"
    assert fam["ridge_point"] == pytest.approx(20941.971 / 1388.9302)
    assert fam["achieved_bytes_per_s"] == pytest.approx(want / (fam["duration_ns"] / 1e9))
    assert r["formulas"]["hbm_bytes"] == "mi200" and r["missing"] == []
    assert r["summary"]["bound"] == "memory" and r["summary"]["memory_bound_share"] == 1.0


def test_mi300_uses_the_ea0_formula_and_spec_ceilings_from_sysinfo() -> None:
    """MI300X vcopy: bytes = 128*BUBBLE + 32*RD32B + 64*(RD-BUBBLE-RD32B) +
    32*(WR-WR64B) + 64*WR64B; no roofline.csv, so gfx942 spec ceilings: 304 CUs x
    2100 MHz x 256 FLOP/clk = 163.4 TFLOP/s FP32, HBM 5324.8 GB/s."""
    t = read_counters([DATA / "rocprof_compute_MI300X_A1"])
    assert t is not None
    ceil = gpu_ceilings(t, None)
    assert ceil is not None and ceil["source"].startswith("spec: gfx942")
    assert ceil["peak_flops_per_s"]["valu_f32"] == 304 * 2100e6 * 256
    assert ceil["hbm_bytes_per_s"] == pytest.approx(5324.8e9)
    r = roofline(t, ceil)
    want = sum(128 * 65536 + 64 * (rd - 65536) + 64 * 131072 for rd in (65775, 65763, 65758))
    assert r["families"][0]["hbm_bytes"] == want and r["formulas"]["hbm_bytes"] == "mi300"
    assert r["families"][0]["bound"] == "memory"
    assert r["summary"]["weight"] == "hbm_bytes"  # its timestamps are rounded to 8.1097E+14


def test_a_gemm_is_compute_bound_and_a_copy_memory_bound_above_and_below_the_ridge() -> None:
    """Synthetic rocprofv3 counters: the GEMM does 512*1e6 MFMA + 64*2*1000 VALU
    FLOPs over 960000 bytes (AI 533, above the ridge 163.4e12/5.3248e12 = 30.7);
    the copy 6400 FLOPs over 12.8 MB (below)."""
    t = read_counters([DATA / "rocprofv3_flops_synthetic"])
    assert t is not None
    ceil = {"source": "test", "hbm_bytes_per_s": 5.3248e12,
            "peak_flops_per_s": {"valu_f32": 163.4e12, "mfma_f32": 163.4e12}}
    r = roofline(t, ceil)
    fam = {f["name"]: f for f in r["families"]}
    g, c = fam["gemm"], fam["copy"]
    assert g["flops"] == 512e6 + 128_000 and g["hbm_bytes"] == 960_000
    assert g["ceiling"] == "mfma_f32" and g["bound"] == "compute"
    assert g["arithmetic_intensity"] == pytest.approx((512e6 + 128_000) / 960_000)
    assert g["achieved_flops_per_s"] == pytest.approx((512e6 + 128_000) / 1e-6)
    assert g["attainable_flops_per_s"] == 163.4e12
    assert c["flops"] == 6400 and c["hbm_bytes"] == 12_800_000 and c["bound"] == "memory"
    assert c["attainable_flops_per_s"] == pytest.approx(6400 / 12_800_000 * 5.3248e12)
    assert r["summary"]["bound"] == "memory"  # the copy holds 10000 of 11000 ns
    assert r["summary"]["memory_bound_share"] == pytest.approx(10 / 11)


def test_counters_without_flops_or_bytes_place_nothing_and_name_what_is_missing() -> None:
    """The real rocprofv3 counter_collection.csv holds only SQ_WAVES: no kernel is
    placed, and `missing` names the FLOP and byte counters to collect."""
    t = read_counters([DATA / "rocprofv3_counters"])
    assert t is not None
    r = roofline(t, {"source": "x", "hbm_bytes_per_s": 1e12,
                     "peak_flops_per_s": {"valu_f32": 1e13}})
    assert r["summary"]["bound"] is None and r["summary"]["placed_families"] == 0
    assert len(r["missing"]) == 2 and "SQ_INSTS_VALU" in r["missing"][0]
    assert "TCC_EA" in r["missing"][1] and r["dispatches"] == 4


def test_the_calibrations_gpu_leg_wins_over_files_beside_the_counters() -> None:
    """A calibration with a GPU leg gives the ceilings (FP32 peak as VALU and MFMA FP32)."""
    t = read_counters([DATA / "rocprof_compute_MI200"])
    assert t is not None
    cal = {"ceilings": {"gpu_peak_flops_float32": 2e13, "gpu_memory_bandwidth": 1e12}}
    ceil = gpu_ceilings(t, cal)
    assert ceil is not None and ceil["source"] == "calibration.json (GPU leg)"
    assert ceil["peak_flops_per_s"] == {"valu_f32": 2e13, "mfma_f32": 2e13}


@pytest.mark.slow
def test_replay_of_a_counter_directory_writes_roofline_json(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """`replay` of the rocprof-compute MI200 workload: its 3 kernels from
    timestamps.csv (pmc_perf.csv not counted twice) and roofline.json placing
    the copy family as memory-bound, and metrics/bottleneck.json re-classified
    from it (memory-bound, roofline first in the evidence); a replay without
    counters writes none."""
    env = {**cli_env, "AACO_CALIBRATION": str(tmp_path / "none.json")}
    r = subprocess.run([EXE, "replay", str(DATA / "rocprof_compute_MI200"), "--out",
                        str(tmp_path)], env=env, capture_output=True, text=True, timeout=240,
                       check=False)
    assert r.returncode == 0, r.stderr
    out = Path(r.stdout.strip().splitlines()[-1])
    roof = json.loads((out / "roofline.json").read_text())
    assert roof["dispatches"] == 3 and roof["summary"]["bound"] == "memory"
    assert json.loads((out / "metrics/derived_metrics.json").read_text())[
        "kernel_count_total"] == 3
    verdict = json.loads((out / "metrics/bottleneck.json").read_text())
    assert verdict["class"] == "memory-bound" and verdict["roofline"] == "roofline.json"
    assert verdict["evidence"][0]["signal"] == "roofline_memory_share"
    assert verdict["evidence"][0]["value"] == 1.0 and "streaming_class" in verdict
    assert "bottleneck               memory-bound" in r.stdout
    r = subprocess.run([EXE, "replay", str(DATA / "rocprofv3_counters/kernel_trace.csv"),
                        "--out", str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=240, check=False)
    assert r.returncode == 0, r.stderr
    assert not (Path(r.stdout.strip().splitlines()[-1]) / "roofline.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("formats", ["csv,json", "csv,json,rocpd"])
def test_capture_with_pmc_passes_the_counters_to_rocprofv3_and_writes_roofline_json(
        tmp_path: Path, cli_env: dict[str, str], formats: str) -> None:
    """`capture --pmc A --pmc B -- CMD` runs rocprofv3 (the test double) with
    `--pmc A B`; its counter output (CSV, or rocpd PMC tables) gives roofline.json.
    The recorded counters are SQ_WAVES only, so nothing is placed and `missing`
    names the FLOP and byte counters; the streaming verdict is left as it was."""
    root = Path(__file__).resolve().parents[2]
    env = {**cli_env, "PATH": f"{root / 'tests/collectors/rocprof/bin'}:{cli_env['PATH']}",
           "ROCPROFV3_DOUBLE_FORMATS": formats, "AACO_CALIBRATION": str(tmp_path / "no.json")}
    r = subprocess.run([EXE, "capture", "--out", str(tmp_path), "--pmc", "SQ_WAVES", "--pmc",
                        "TCC_EA0_RDREQ", "--", sys.executable, "-c", "pass"], env=env,
                       capture_output=True, text=True, timeout=240, check=False)
    assert r.returncode == 0, r.stderr
    out = Path(r.stdout.strip().splitlines()[-1])
    argv = json.loads((out / "session.json").read_text())["argv"]
    i = argv.index("--pmc")
    assert argv[i + 1:i + 3] == ["SQ_WAVES", "TCC_EA0_RDREQ"]
    roof = json.loads((out / "roofline.json").read_text())
    assert roof["dispatches"] == 4 and len(roof["missing"]) == 2
    assert roof["summary"]["placed_families"] == 0
    assert "roofline" not in json.loads((out / "metrics/bottleneck.json").read_text())


def test_pmc_without_a_command_is_a_usage_error() -> None:
    """--pmc with --model: exit 2 saying counters need -- COMMAND."""
    from typer.testing import CliRunner

    from exporter.cli import app

    r = CliRunner().invoke(app, ["capture", "--model", "magika", "--pmc", "SQ_WAVES"])
    assert r.exit_code == 2 and "--pmc needs -- COMMAND ARGS" in r.output

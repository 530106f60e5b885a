"""`aaco-exporter calibrate`: microbenchmarks, the stored file, reuse and refresh."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from exporter import calibrate as cal
from exporter.cli import app

SMALL = ["--gemm-n", "128", "--reps", "2", "--stream-mib", "2"]


def test_calibrate_stores_every_figure_with_repetitions_median_and_spread(tmp_path: Path) -> None:
    """The file holds host, CPU model, BLAS config, four figures with their
    repetitions, and ceilings equal to the medians; the GPU leg says why it skipped."""
    path = tmp_path / "cal.json"
    r = CliRunner().invoke(app, ["calibrate", "--calibration", str(path), *SMALL])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == f"calibration measured: {path}"
    data = json.loads(path.read_text())
    assert data["format"] == "aaco-calibration" and data["host"] == socket.gethostname()
    assert data["cpu_model"] == cal.cpu_model() and data["blas"]["numpy"]
    assert set(data["figures"]) == {"gemm_float32", "gemm_float64", "stream_copy",
                                    "stream_triad"}
    for f in data["figures"].values():
        assert len(f["repetitions"]) == 2 and f["min"] <= f["median"] <= f["max"]
        assert f["median"] > 0 and f["spread_ratio"] >= 0
    assert data["figures"]["gemm_float32"]["n"] == 128
    assert data["figures"]["stream_copy"]["array_bytes"] == 2 << 20
    c = data["ceilings"]
    assert c["cpu_peak_flops_float32"] == data["figures"]["gemm_float32"]["median"]
    assert c["cpu_memory_bandwidth"] == max(data["figures"]["stream_copy"]["median"],
                                            data["figures"]["stream_triad"]["median"])
    gpu = data["gpu"]
    if "skipped" in gpu:  # this CI image has neither torch nor cupy
        assert "\n" not in gpu["skipped"] and f"GPU leg skipped: {gpu['skipped']}" in r.output


def test_a_stored_calibration_is_reused_and_refresh_remeasures(tmp_path: Path) -> None:
    """A second run reuses the file unchanged; --refresh measures again."""
    path = tmp_path / "cal.json"
    runner = CliRunner()
    assert runner.invoke(app, ["calibrate", "--calibration", str(path), *SMALL]).exit_code == 0
    first = path.read_text()
    r = runner.invoke(app, ["calibrate", "--calibration", str(path), *SMALL])
    assert r.exit_code == 0 and r.output.strip().endswith(f"calibration reused: {path}")
    assert path.read_text() == first
    r = runner.invoke(app, ["calibrate", "--calibration", str(path), "--refresh", *SMALL])
    assert r.output.strip().endswith(f"calibration remeasured: --refresh: {path}")
    assert json.loads(path.read_text())["measured_at"]  # rewritten, still valid
    assert cal.find(path) is not None


def test_a_corrupt_or_foreign_file_is_remeasured_and_find_ignores_it(tmp_path: Path) -> None:
    """A file that is not JSON, or another host's, is not used: find() gives
    None and calibrate() remeasures, saying why."""
    path = tmp_path / "cal.json"
    path.write_text("{not json")
    assert cal.find(path) is None
    with pytest.raises(cal.CalibrationError, match=r"cal\.json: not JSON"):
        cal.load(path)
    opts = cal.CalibrateOptions(gemm_n=64, gemm_reps=1, stream_bytes=1 << 20, stream_reps=1,
                                gpu=False)
    data, how = cal.calibrate(path, opts=opts)
    assert how.startswith("remeasured: ") and "not JSON" in how
    data["host"] = "elsewhere"
    path.write_text(json.dumps(data))
    assert cal.find(path) is None
    _, how = cal.calibrate(path, opts=opts)
    assert how == "remeasured: measured on host 'elsewhere'"
    assert cal.find(path) is not None


def test_default_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """$AACO_CALIBRATION wins, else $XDG_CACHE_HOME/aaco-exporter/calibration.json."""
    monkeypatch.delenv("AACO_CALIBRATION", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cal.default_path() == tmp_path / "aaco-exporter/calibration.json"
    monkeypatch.setenv("AACO_CALIBRATION", str(tmp_path / "x.json"))
    assert cal.default_path() == tmp_path / "x.json"


def test_cpu_model_and_llc_come_from_proc_and_sysfs(tmp_path: Path) -> None:
    """model name is read from a cpuinfo file; the LLC is the highest non-instruction level."""
    info = tmp_path / "cpuinfo_synthetic"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    assert cal.cpu_model(info) == "AMD EPYC 9654 96-Core Processor"
    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"),
                                            (2, "Unified", "1024K"), (3, "Unified", "32M")]):
        d = tmp_path / "cache_synthetic" / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cal.llc_bytes(tmp_path / "cache_synthetic") == 32 << 20

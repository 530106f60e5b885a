"""`aaco-exporter capture`, `replay` and bad input, through the console script."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pyarrow.parquet as pq
import pytest
from onnx import TensorProto, helper

from stream_analytics.bottleneck import recommendation

ROCPROF_V1 = Path(__file__).resolve().parents[2] / "collectors/rocprof/testdata"
EXE = str(Path(sys.executable).parent / "aaco-exporter")


def _run(args: list[str], env: dict[str, str],
         timeout: int = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.slow
def test_capture_writes_the_bundle_and_kar_matches_orts_own_profile(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """KAR from capture is within 2% of (kernel events per run in ORT's own
    profile / non-Constant graph nodes); stdout's last line is the session."""
    r = _run(["capture", "--model", "magika", "--iterations", "40", "--warmup", "3",
              "--out", str(tmp_path), "--quiet"], cli_env)
    assert r.returncode == 0, r.stderr
    session = Path(r.stdout.strip().splitlines()[-1])
    assert session.is_dir() and session.parent == tmp_path
    for rel in ("session.json", "env.json", "model/model_meta.json",
                "model/graph_nodes.parquet", "model/graph_edges.parquet",
                "profiler/kernels.parquet", "telemetry/system_events.parquet",
                "metrics/inference_iters.parquet", "metrics/inference_summary.json",
                "metrics/derived_metrics.json", "metrics/bottleneck.json", "trace.pftrace"):
        assert (session / rel).is_file(), rel
    derived = json.loads((session / "metrics/derived_metrics.json").read_text())
    for key in ("graph_node_count", "kernel_count", "iterations", "kar", "launch_tax", "sii",
                "gpu_active_ratio"):
        assert derived[key] is not None, key
    assert set(derived["latency_ms"]) == {"mean", "p50", "p99"}
    assert derived["iterations"] == 40
    timings = json.loads((session / "session.json").read_text())["timings_s"]
    assert {"start", "run", "analytics", "bundle", "trace", "total"} <= set(timings)
    # the consumer's folding while the model ran is timed, and the phases that
    # cannot overlap (start-up, the run, the bundle, the trace) fit in the total
    assert timings["analytics"] > 0
    serial = sum(timings[k] for k in ("start", "run", "bundle", "trace"))
    assert serial <= timings["total"], timings
    assert "timings:" not in r.stderr  # --quiet
    # the graph-only session that saves ORT's optimized graph stays quiet
    assert "Serializing optimized model" not in r.stderr
    # Independent computation from ORT's own profile files.
    meta = json.loads((session / "model/model_meta.json").read_text())
    nodes = sum(n for op, n in meta["op_histogram"].items() if op != "Constant")
    per_run: list[int] = []
    for f in sorted((session / "profiler").glob("ort_profile_*.json")):
        ev = json.loads(f.read_text())
        runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] == "model_run")
        ks = np.array(sorted(e["ts"] for e in ev if e.get("cat") == "Node"
                             and e["name"].endswith("_kernel_time")))
        per_run += [int(((ks >= a) & (ks <= b)).sum()) for a, b in runs]
    expected = float(np.mean(per_run)) / nodes
    assert derived["kar"] == pytest.approx(expected, rel=0.02)
    kernels = pq.read_table(session / "profiler/kernels.parquet")
    assert kernels.num_rows == derived["kernel_count"]
    assert "KAR" in r.stdout and "LTS" in r.stdout and "SII" in r.stdout
    # every kernel ran on ORT's CPU EP: the results say so, and the verdict's
    # advice is the CPU one of its class
    results = pq.read_table(session / "metrics/analytics.parquet")
    assert set(results.column("device_type").to_pylist()) == {"cpu"}
    verdict = json.loads((session / "metrics/bottleneck.json").read_text())
    assert verdict["class"] is not None
    assert verdict["recommendation"] == recommendation(verdict["class"], "cpu")


def _string_input_model(path: Path) -> Path:
    node = helper.make_node("Identity", ["s"], ["o"])
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("s", TensorProto.STRING, [1])],
                          [helper.make_tensor_value_info("o", TensorProto.STRING, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


@pytest.mark.slow
def test_capture_without_quiet_keeps_stdout_to_results_and_times_phases_on_stderr(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Piped (no terminal), a capture without --quiet writes no progress
    output at all: stdout holds only the summary lines and the session path
    (rich's transient bar printed an empty line on stdout); stderr has the
    one `timings:` line, starting with the start-up phase."""
    r = _run(["capture", "--model", "magika", "--iterations", "2", "--warmup", "1",
              "--out", str(tmp_path)], cli_env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines and all(x.strip() for x in lines), r.stdout
    assert Path(lines[-1]).parent == tmp_path and lines[0].startswith("KAR")
    (timing,) = [x for x in r.stderr.splitlines() if x.startswith("timings: ")]
    assert timing.startswith("timings: start ") and ", run " in timing


@pytest.mark.parametrize("case", ["missing", "not_onnx", "string_input", "bad_nats"])
def test_bad_input_exits_2_with_one_clear_line(case: str, tmp_path: Path,
                                               cli_env: dict[str, str]) -> None:
    """A missing file, a non-ONNX file, ungeneratable inputs, or an unreachable
    --nats URL: exit status 2 and an error line, never a traceback."""
    args = ["capture", "--iterations", "2", "--out", str(tmp_path), "--quiet"]
    if case == "missing":
        args += ["--model", str(tmp_path / "absent.onnx")]
        expect = "no such model file"
    elif case == "not_onnx":
        (tmp_path / "text.onnx").write_text("I am not a model\n")
        args += ["--model", str(tmp_path / "text.onnx")]
        expect = "not an ONNX model"
    elif case == "string_input":
        args += ["--model", str(_string_input_model(tmp_path / "string_input_synthetic.onnx"))]
        expect = "cannot be generated"
    else:
        args += ["--model", "magika", "--nats", "nats://127.0.0.1:9"]
        expect = "cannot reach NATS at nats://127.0.0.1:9"
    r = _run(args, cli_env, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expect in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["finite_difference", "seismic_stencils"])
def test_replay_of_rocprof_v1_matches_its_stats_file_to_the_nanosecond(
        name: str, tmp_path: Path, cli_env: dict[str, str]) -> None:
    """replay writes per-kernel calls, total, avg, min and max equal to the
    results.stats.csv that the same rocprof v1 run wrote."""
    results = next(ROCPROF_V1.rglob(f"{name}_results.csv"))
    stats_csv = next(ROCPROF_V1.rglob(f"{name}_results.stats.csv"))
    r = _run(["replay", str(results), "--out", str(tmp_path)], cli_env)
    assert r.returncode == 0, r.stderr
    session = Path(r.stdout.strip().splitlines()[-1])
    got = {row["kernel_name"]: row for row in
           pq.read_table(session / "profiler/kernel_stats.parquet").to_pylist()}
    with stats_csv.open() as f:
        want = list(csv.DictReader(f))
    assert set(got) == {w["Name"] for w in want}
    for w in want:
        g = got[w["Name"]]
        assert g["calls"] == int(w["Calls"])
        assert g["total_ns"] == int(w["TotalDurationNs"])
        assert g["avg_ns"] == int(w["AverageNs"])
        if "MinNs" in w:
            assert (g["min_ns"], g["max_ns"]) == (int(w["MinNs"]), int(w["MaxNs"]))
    derived = json.loads((session / "metrics/derived_metrics.json").read_text())
    assert derived["kernel_count"] == sum(int(w["Calls"]) for w in want)


@pytest.mark.slow
def test_replay_of_a_rocprofv3_run_with_roctx_markers_gives_kernels_per_iteration(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Real kernel rows + the synthetic marker trace around them (see
    tests/collectors/rocprof/test_rocprof_markers.py): derived_metrics.json has
    8 kernels / 2 roctx iterations = 4 per iteration, kar_source roctx, KAR
    null (no graph_info); kernel 13, outside every range, still counts in
    kernel_count once the session settles (9)."""
    import shutil

    run = tmp_path / "in" / "834304"
    run.mkdir(parents=True)
    shutil.copy(ROCPROF_V1 / "kernel_trace.csv", run / "kernel_trace.csv")
    shutil.copy(ROCPROF_V1 / "roctx_synthetic" / "marker_api_trace.csv",
                run / "marker_api_trace.csv")
    r = _run(["replay", str(tmp_path / "in"), "--out", str(tmp_path / "out")], cli_env)
    assert r.returncode == 0, r.stderr
    session = Path(r.stdout.strip().splitlines()[-1])
    derived = json.loads((session / "metrics/derived_metrics.json").read_text())
    assert (derived["iterations"], derived["kernel_count"], derived["kernels_per_iteration"],
            derived["kar_source"], derived["kar"]) == (2, 9, 4.0, "roctx", None)

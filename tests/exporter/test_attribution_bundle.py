"""`capture` bundles carry operator -> kernel attribution and the ORT runtime
config (exporter/attribution_bundle.py), checked on a real magika capture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

EXE = str(Path(sys.executable).parent / "aaco-exporter")


@pytest.mark.slow
def test_capture_bundle_maps_every_published_kernel_and_states_pfi(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """The map has one row per kernel span in profiler/kernels.parquet (same
    start times and iterations, warm-ups excluded), kernel_groups' node level
    counts 20 calls per node, and ort_config.json gives providers, session
    options and PFI = partitions / nodes over the 96 executed nodes."""
    r = subprocess.run([EXE, "capture", "--model", "magika", "--iterations", "20",
                        "--warmup", "2", "--out", str(tmp_path), "--quiet"],
                       env=cli_env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    s = Path(r.stdout.strip().splitlines()[-1])
    m = pq.read_table(s / "attribution/op_to_kernel_map.parquet")
    k = pq.read_table(s / "profiler/kernels.parquet")
    assert m.num_rows == k.num_rows == 20 * 96
    assert sorted(m["start_ns"].to_pylist()) == sorted(k["start_ns"].to_pylist())
    assert set(m["iteration"].to_pylist()) == set(range(20))
    assert set(m["method"].to_pylist()) == {"ort_node"}
    g = pq.read_table(s / "attribution/kernel_groups.parquet")
    nodes = g.filter(pc.equal(g["level"], "node"))
    assert nodes.num_rows == 96 and set(nodes["calls"].to_pylist()) == {20}
    cfg = json.loads((s / "runtime/ort_config.json").read_text())
    assert cfg["providers"] == ["CPUExecutionProvider"]
    assert cfg["nodes"] == 96 and len(cfg["assignment"]) == 96
    assert cfg["pfi"] == cfg["partitions"] / 96
    assert "graph_optimization_level" in cfg["session_options"]

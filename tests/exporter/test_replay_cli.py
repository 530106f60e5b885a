"""`aaco-exporter replay` on the real rocprofv3 kernel trace fixture: phase
timings on stderr and in session.json, `--quiet` for scripts, every kernel in
the streamed trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

ROOT = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).parent / "aaco-exporter")
FIXTURE = ROOT / "collectors/rocprof/testdata/kernel_trace.csv"  # real, see PROVENANCE.md
PHASES = {"start", "parse", "bus", "analytics", "bundle", "trace", "total"}


def _replay(out: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "replay", str(FIXTURE), "--out", str(out), *flags], env=env,
                          capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.slow
def test_replay_prints_phase_timings_and_records_them_in_session_json(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Without --quiet: one `timings:` line on stderr naming every phase; the same
    phases in session.json `timings_s`, each within the total; the trace has one
    kernel slice per input row (9)."""
    r = _replay(tmp_path / "out", cli_env)
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("timings: ")]
    assert all(f"{p} " in line for p in PHASES)
    session = Path(r.stdout.strip().splitlines()[-1])
    t = json.loads((session / "session.json").read_text())["timings_s"]
    assert set(t) == PHASES
    assert all(0 <= v <= t["total"] for v in t.values())
    trace = Trace.FromString((session / "trace.pftrace").read_bytes())
    cats = {c.iid: c.name for p in trace.packet for c in p.interned_data.event_categories}
    begins = [p.track_event for p in trace.packet
              if p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN]
    assert sum(cats[e.category_iids[0]] == "kernel" for e in begins) == 9


@pytest.mark.slow
def test_replay_quiet_prints_no_timings_and_keeps_stdout_for_scripts(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """--quiet: no timings line and no progress output on stderr; stdout still
    ends with the bundle directory."""
    r = _replay(tmp_path / "out", cli_env, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "timings:" not in r.stderr and "replay rows" not in r.stderr
    assert Path(r.stdout.strip().splitlines()[-1]).is_dir()


@pytest.mark.slow
def test_replay_of_a_kernel_trace_alone_reports_launch_tax_as_unknown(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """The real kernel trace with no HIP API trace and no iterations: launch
    overhead is unknown, so the summary prints `LTS ... n/a` (not 0.0000),
    a missing graph's node count `n/a` (not None), and derived_metrics.json
    holds null for both launch fields while kernel time and count are known."""
    r = _replay(tmp_path / "out", cli_env, "--quiet")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    (lts,) = [x for x in lines if x.startswith("LTS")]
    assert lts.split()[-1] == "n/a"
    (kar,) = [x for x in lines if x.startswith("KAR")]
    assert "(9 kernels, 0 iterations, n/a nodes)" in kar
    d = json.loads((Path(lines[-1]) / "metrics/derived_metrics.json").read_text())
    assert d["launch_tax"] is None and d["launch_overhead_ns"] is None
    assert d["kernel_count"] == 9 and d["kernel_time_ns"] == 96_160

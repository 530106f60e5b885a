"""rocprofv3 --attach sampling windows against real target processes, with the
rocprofv3 TEST DOUBLE (tests/collectors/rocprof/bin/rocprofv3, attach mode: a
synthetic rocpd database of the real fixture's kernel rows, the target's pid)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from collectors.attach.requirements import env_problem, ptrace_problem, tool_problem
from collectors.base import CollectorContext, Emit, create
from exporter.natsserver import free_port
from stream_analytics.engine import Analytics
from tests.support import ROOT, scrape_metrics

DOUBLE_DIR = ROOT / "tests/collectors/rocprof/bin"  # a test double of rocprofv3, not the tool
FIXTURE = ROOT / "collectors/rocprof/testdata/kernel_trace.csv"
DISPATCHES = sum(1 for line in FIXTURE.read_text().splitlines()
                 if line.startswith('"KERNEL_DISPATCH"'))
EXE = str(Path(sys.executable).parent / "aaco-exporter")


@pytest.fixture
def double_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{DOUBLE_DIR}:{os.environ['PATH']}")


def _execed(p: subprocess.Popen[bytes], exe: str = "sleep") -> None:
    """Wait until ``p`` runs ``exe``: between fork and exec its /proc/PID/environ
    is still the parent's."""
    for _ in range(500):
        try:
            if Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")[0].endswith(
                    exe.encode()):
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"pid {p.pid} never ran {exe}")


@pytest.fixture
def target() -> Iterator[subprocess.Popen[bytes]]:
    """A running process started with ROCP_TOOL_ATTACH=1 (a server stand-in)."""
    p = subprocess.Popen(["sleep", "600"], env=dict(os.environ, ROCP_TOOL_ATTACH="1"))
    _execed(p)
    yield p
    p.kill()
    p.wait()


def _windows(c: object, n: int, timeout_s: float = 30) -> list[Emit]:
    """collect() until ``n`` windows finished; every emit of the way."""
    out: list[Emit] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out += list(c.collect())  # type: ignore[attr-defined]
        if sum(1 for e in out if e.key.endswith(":duty")) >= n:
            return out
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} windows in {timeout_s} s: {out}")


def test_tool_check_finds_attach_in_the_help(double_on_path: None, tmp_path: Path) -> None:
    assert tool_problem("rocprofv3") is None
    old = tmp_path / "rocprofv3-old"
    old.write_text("#!/bin/sh\necho 'usage: rocprofv3 [options] -- app'\n")
    old.chmod(0o755)
    assert "has no --attach" in (tool_problem(str(old)) or "")
    assert "not found" in (tool_problem("no-such-rocprofv3") or "")


def test_env_check_reads_rocp_tool_attach_from_proc(target: subprocess.Popen[bytes]) -> None:
    """The target's /proc/PID/environ must hold ROCP_TOOL_ATTACH=1."""
    assert env_problem(target.pid) is None
    with subprocess.Popen(["sleep", "600"], env={"PATH": os.environ["PATH"]}) as plain:
        try:
            _execed(plain)
            assert "ROCP_TOOL_ATTACH=1" in (env_problem(plain.pid) or "")
        finally:
            plain.kill()
    assert "does not exist" in (env_problem(2**22 + 12345) or "")


def test_ptrace_check_allows_own_children_and_names_yama(target: subprocess.Popen[bytes],
                                                         tmp_path: Path) -> None:
    assert ptrace_problem(target.pid) is None  # same user (root in CI)
    fake = tmp_path / "proc"
    (fake / "sys/kernel/yama").mkdir(parents=True)
    (fake / "sys/kernel/yama/ptrace_scope").write_text("2\n")
    (fake / "self").mkdir()
    (fake / "self/status").write_text("CapEff:\t0000000000000000\n")
    (fake / str(target.pid)).mkdir()
    assert "ptrace_scope=2 without CAP_SYS_PTRACE" in (ptrace_problem(target.pid, fake) or "")
    (fake / "sys/kernel/yama/ptrace_scope").write_text("3\n")
    assert "ptrace_scope=3" in (ptrace_problem(target.pid, fake) or "")


def test_a_window_publishes_the_tools_kernels_with_the_targets_pid_then_deletes_its_db(
        double_on_path: None, target: subprocess.Popen[bytes], tmp_path: Path) -> None:
    c = create("attach", CollectorContext(host="h", options={
        "pids": [target.pid], "every_s": 60.0, "window_s": 0.2,
        "out_dir": str(tmp_path / "w")}, log=str))
    emits = _windows(c, 1)
    spans = [e.batch for e in emits if e.signal == "kernel_span"]
    rows = pa.Table.from_batches([b if isinstance(b, pa.RecordBatch) else b.to_batches()[0]
                                  for b in spans])
    assert rows.num_rows == DISPATCHES
    assert set(rows.column("pid").to_pylist()) == {target.pid}
    duty = {r["metric"]: r for e in emits if e.signal == "gauge_sample"
            for r in pa.table(e.batch).to_pylist()}
    assert duty["aaco.attach.window.spans"]["value"] == DISPATCHES
    assert duty["aaco.attach.window.duration"]["value"] >= 0.2
    assert not list((tmp_path / "w").rglob("*.db")), "window database not deleted"
    assert c.windows[(target.pid, "ok")] == 1  # type: ignore[attr-defined]
    c.close()


def test_a_failed_window_is_counted_and_the_next_runs_on_schedule(
        double_on_path: None, target: subprocess.Popen[bytes], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = create("attach", CollectorContext(host="h", options={
        "pids": [target.pid], "every_s": 0.3, "window_s": 0.1,
        "out_dir": str(tmp_path / "w")}, log=str))
    monkeypatch.setenv("ROCPROFV3_DOUBLE_ATTACH_FAIL", "1")
    emits = _windows(c, 1)
    assert not [e for e in emits if e.signal == "kernel_span"]
    assert c.drops()["window_tool_exit"] == 1
    monkeypatch.delenv("ROCPROFV3_DOUBLE_ATTACH_FAIL")
    # The collect that harvested the failed window may have started the next
    # one already (due every 0.3 s), still failing: collect until one is ok.
    emits = []
    deadline = time.monotonic() + 30
    while not c.windows[(target.pid, "ok")] and time.monotonic() < deadline:  # type: ignore[attr-defined]
        emits += _windows(c, 1)
    assert sum(pa.table(e.batch).num_rows for e in emits
               if e.signal == "kernel_span") == DISPATCHES
    failed = c.windows[(target.pid, "failed")]  # type: ignore[attr-defined]
    assert failed in (1, 2) and c.drops()["window_tool_exit"] == failed
    assert c.windows[(target.pid, "ok")] == 1  # type: ignore[attr-defined]
    c.close()


def test_a_target_without_rocp_tool_attach_is_skipped_counted_and_logged_once(
        double_on_path: None) -> None:
    logs: list[str] = []
    with subprocess.Popen(["sleep", "600"], env={"PATH": os.environ["PATH"]}) as plain:
        try:
            _execed(plain)
            c = create("attach", CollectorContext(host="h", options={
                "pids": [plain.pid], "every_s": 0.1, "window_s": 0.05}, log=logs.append))
            for _ in range(3):
                assert list(c.collect()) == []
                time.sleep(0.12)
            assert c.drops()["not_attachable"] == 3
            assert len([m for m in logs if "ROCP_TOOL_ATTACH" in m]) == 1
            assert not c.running  # type: ignore[attr-defined]
        finally:
            plain.kill()


def test_engine_splits_iteration_latency_inside_and_outside_attach_windows() -> None:
    """Iterations starting inside a window (from the duty rows) vs outside."""
    eng = Analytics(window_s=None)
    its = pa.table({"model": ["m"] * 4, "pid": [7] * 4, "iteration": [0, 1, 2, 3],
                    "start_ns": [0, 100, 200, 300], "end_ns": [10, 130, 210, 310],
                    "duration_ns": [10, 30, 10, 10]})
    eng.ingest("iteration_span", "h", its)
    eng.ingest("gauge_sample", "h", pa.table({
        "ts_ns": [150], "metric": ["aaco.attach.window.duration"], "value": [60e-9],
        "kind": ["gauge"], "unit": ["s"], "source": ["rocprofv3"],
        "attributes": pa.array([[("pid", "7")]], pa.map_(pa.string(), pa.string()))}))
    r = eng.evaluate(("h", 7, "m"))
    assert r["latency_attached_mean_s"] == pytest.approx(30e-9)  # iteration 1 only
    assert r["latency_detached_mean_s"] == pytest.approx(10e-9)


@pytest.mark.slow
def test_run_attach_publishes_every_windows_spans_and_the_duty_cycle(
        target: subprocess.Popen[bytes], tmp_path: Path, nats_server: object) -> None:
    """`run --attach PID`: each window adds exactly the double's kernel rows to
    /metrics for the target's pid, and the duty-cycle series are exported."""
    port = free_port()
    env = dict(os.environ, PATH=f"{DOUBLE_DIR}:{os.environ['PATH']}")
    daemon = subprocess.Popen(
        [EXE, "run", "--attach", str(target.pid), "--attach-every", "1", "--attach-window",
         "0.3", "--watch", "none", "--nats", nats_server.url,  # type: ignore[attr-defined]
         "--metrics-addr", f"127.0.0.1:{port}", "--log-level", "WARNING"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def read() -> tuple[float, float, dict[str, list[tuple[dict[str, str], float]]]]:
            try:
                m = scrape_metrics(port)
            except OSError:
                return 0.0, 0.0, {}
            spans = sum(v for lab, v in m.get("aaco_kernel_spans_total", [])
                        if lab["pid"] == str(target.pid))
            ok = sum(v for lab, v in m.get("aaco_attach_windows_total", [])
                     if lab.get("outcome") == "ok")
            return spans, ok, m

        deadline = time.monotonic() + 60
        spans, ok, m = read()
        while ok < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
            spans, ok, m = read()
        target.kill()  # no more windows: the counts settle (kernels wait <= 5 s for spans)
        target.wait()
        while time.monotonic() < deadline:
            spans, ok, m = read()
            if ok >= 2 and spans == DISPATCHES * ok:
                break
            time.sleep(0.3)
        assert ok >= 2 and spans == DISPATCHES * ok, (ok, spans)
        assert m.get("aaco_attach_window_duration_seconds")
        assert m.get("aaco_attach_window_spans")  # unit {span}: no _ratio suffix
    finally:
        daemon.terminate()
        daemon.wait(30)


LOOP = """
import sys, time
import onnxruntime as ort
from collectors.ort.inputs import make_inputs
sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feed = make_inputs(sess.get_inputs())
print("ready", flush=True)
while True:
    sess.run(None, feed)
"""


@pytest.mark.slow
def test_attach_to_an_instrumented_server_gives_gpu_kernel_kar_with_its_source(
        tmp_path: Path, nats_server: object, magika_model: Path) -> None:
    """A server under `instrument` started with ROCP_TOOL_ATTACH=1 and sampled
    with `run --attach`: the windows' GPU kernels join its iteration spans,
    /metrics shows KAR from GPU kernels with kar_source instrumented_iteration,
    and the server's mean latency inside and outside the windows."""
    url = nats_server.url  # type: ignore[attr-defined]
    port = free_port()
    (tmp_path / "loop.py").write_text(LOOP)
    env = dict(os.environ, PATH=f"{DOUBLE_DIR}:{os.environ['PATH']}", AACO_NATS_URL=url,
               ROCP_TOOL_ATTACH="1")
    loop = subprocess.Popen([EXE, "instrument", "--", sys.executable, str(tmp_path / "loop.py"),
                             str(magika_model)], env=env, stdout=subprocess.PIPE, text=True)
    assert loop.stdout is not None and loop.stdout.readline().strip() == "ready"
    daemon = subprocess.Popen(
        [EXE, "run", "--watch", "none", "--nats", url, "--metrics-addr", f"127.0.0.1:{port}",
         "--attach", str(loop.pid), "--attach-every", "1", "--attach-window", "0.3",
         "--log-level", "WARNING"], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline, m = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            try:
                m = scrape_metrics(port)
            except OSError:
                m = {}
            src = [lab for lab, _ in m.get("aaco_kar_source_info", [])
                   if lab.get("pid") == str(loop.pid)]
            phases = {lab["phase"] for lab, _ in m.get(
                "aaco_attach_iteration_latency_seconds", []) if lab.get("pid") == str(loop.pid)}
            if src and phases == {"inside", "outside"} and any(
                    lab.get("pid") == str(loop.pid)
                    for lab, _ in m.get("aaco_kernel_amplification_ratio", [])):
                break
            time.sleep(0.5)
        assert [lab["kar_source"] for lab, _ in m.get("aaco_kar_source_info", [])
                if lab.get("pid") == str(loop.pid)] == ["instrumented_iteration"], m.get(
            "aaco_kar_source_info")
        (kar,) = [v for lab, v in m["aaco_kernel_amplification_ratio"]
                  if lab["pid"] == str(loop.pid)]
        assert kar > 0
        # the duty cycle's cost: the server's latency inside and outside windows
        lat = {lab["phase"]: v for lab, v in m["aaco_attach_iteration_latency_seconds"]
               if lab["pid"] == str(loop.pid)}
        assert set(lat) == {"inside", "outside"} and min(lat.values()) > 0
    finally:
        daemon.terminate()
        daemon.wait(30)
        loop.kill()
        loop.wait()

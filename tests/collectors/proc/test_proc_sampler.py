"""The /proc scheduler sampler on real threads of this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from collectors.proc.sampler import ProcSampler
from stream_analytics.sii import SII


def test_busy_child_accumulates_run_time_and_deltas_are_per_interval() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\n"
                              "while time.time()-t<3: pass"])
    try:
        s = ProcSampler()
        assert s.sample({child.pid}).num_rows == 0  # priming
        time.sleep(0.5)
        t = s.sample({child.pid})
        assert t.num_rows == 1
        row = t.to_pylist()[0]
        assert row["pid"] == child.pid and row["source"] == "proc"
        assert 0.2e9 < row["run_ns"] + row["runq_wait_ns"] <= row["interval_ns"] * 1.05
        assert row["comm"] == "python" or row["comm"].startswith("python")
    finally:
        child.kill()
        child.wait()


def test_exited_process_is_forgotten_without_error() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    s = ProcSampler()
    s.sample({child.pid})
    child.wait()
    assert s.sample({child.pid}).num_rows == 0


def test_sii_rises_when_three_busy_processes_share_two_cores() -> None:
    """3 CPU-bound processes on 2 cores wait in the run queue about 1/3 of the time."""
    n = max(3, (os.cpu_count() or 2) + 1)
    code = "import time\nt=time.time()\nwhile time.time()-t<2.5: pass"
    kids = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        s = ProcSampler()
        s.sample({k.pid for k in kids})
        time.sleep(1.5)
        sii = SII().update(s.sample({k.pid for k in kids})).get()
    finally:
        for k in kids:
            k.kill()
            k.wait()
    assert sii is not None and sii > 0.15


def test_read_thread_agrees_with_psutil_on_this_thread() -> None:
    """read_thread parses status as bytes: this main thread's voluntary and
    involuntary switch counts lie between psutil's readings (of the same
    status file) taken before and after it, and its comm is psutil's name
    cut at 15 characters."""
    import threading
    from pathlib import Path

    import psutil

    from collectors.proc.sampler import read_thread

    me = psutil.Process()
    tid = threading.get_native_id()
    before = me.num_ctx_switches()
    c = read_thread(f"/proc/{os.getpid()}/task/{tid}")
    after = me.num_ctx_switches()
    assert c is not None
    assert tid == os.getpid()  # the main thread: /proc/PID/status is its own
    assert before.voluntary <= c.voluntary <= after.voluntary
    assert before.involuntary <= c.involuntary <= after.involuntary
    assert c.voluntary + c.involuntary > 0 and c.run_ns > 0
    assert c.comm == Path(f"/proc/{os.getpid()}/task/{tid}/comm").read_text().strip()

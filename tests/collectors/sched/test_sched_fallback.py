"""Fallback rules of the sched collector: each bad condition gives a clear
message, the /proc backend, and no crash."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from collectors.base import CollectorContext, available, create
from collectors.sched import SchedCollector, cgroup_target
from collectors.sched.probe import ProbeError, bpf_privilege_problem


def _collect_rows(c: SchedCollector) -> list[dict[str, object]]:
    return [r for e in c.collect() for r in e.batch.to_pylist()]


def test_sched_is_a_registered_collector():
    """The plugin sub-package registers itself under the name "sched"."""
    assert "sched" in available()


def test_no_bcc_falls_back_to_proc_with_one_message(monkeypatch):
    """bcc not importable (sys.modules['bcc'] = None): source "auto" logs
    one message naming no-bcc, runs on /proc and still emits rows for a
    watched process; source "ebpf" raises ProbeError(no-bcc)."""
    monkeypatch.setitem(sys.modules, "bcc", None)
    logs: list[str] = []
    ctx = CollectorContext(pids={os.getpid()}, log=logs.append)
    c = create("sched", ctx)
    assert isinstance(c, SchedCollector)
    assert c.source == "proc"
    assert len(logs) == 1 and "no-bcc" in logs[0] and "/proc" in logs[0], logs
    assert _collect_rows(c) == []  # first /proc sample primes the deltas
    sum(range(200_000))
    rows = _collect_rows(c)
    assert (
        rows
        and {r["source"] for r in rows} == {"proc"}
        and {r["pid"] for r in rows} == {os.getpid()}
    )
    assert len(logs) == 1
    c.close()
    with pytest.raises(ProbeError) as ei:
        SchedCollector(CollectorContext(options={"source": "ebpf"}, log=logs.append))
    assert ei.value.reason == "no-bcc"


def test_source_proc_never_tries_ebpf():
    """source="proc" uses /proc without a message, even where eBPF works."""
    logs: list[str] = []
    c = SchedCollector(CollectorContext(options={"source": "proc"}, log=logs.append))
    assert c.source == "proc" and logs == [] and c.fallback_reason is None


def test_bad_source_option_is_rejected():
    """An unknown source value raises ValueError naming the option."""
    with pytest.raises(ValueError, match="source='bpf'"):
        SchedCollector(CollectorContext(options={"source": "bpf"}))


def test_privilege_check_reads_capeff(tmp_path: Path):
    """CapEff without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN is a problem that
    names the missing capabilities; CAP_BPF+CAP_PERFMON alone or
    CAP_SYS_ADMIN alone is enough."""
    f = tmp_path / "status"
    f.write_text("Name:\tx\nCapEff:\t0000000000000000\n")
    msg = bpf_privilege_problem(str(f))
    assert msg is not None and "CAP_BPF" in msg
    f.write_text(f"CapEff:\t{(1 << 38) | (1 << 39):016x}\n")
    assert bpf_privilege_problem(str(f)) is None
    f.write_text(f"CapEff:\t{1 << 21:016x}\n")
    assert bpf_privilege_problem(str(f)) is None
    f.write_text(f"CapEff:\t{1 << 39:016x}\n")
    assert bpf_privilege_problem(str(f)) is not None


def test_missing_cgroup_directory_is_a_clear_error():
    """cgroup option naming no directory: ValueError naming the option."""
    with pytest.raises(ValueError, match="cgroup='no/such/group'"):
        cgroup_target("no/such/group")
    assert cgroup_target(None) == (0, None)
    assert cgroup_target(1234) == (1234, None)


def _in_child_as_nobody(bypass_check: bool) -> dict[str, object]:
    """Fork; the child drops to uid/gid 65534 and builds the collector."""
    import bcc  # noqa: F401  (imported before the fork: /root is 0700)

    import collectors.sched.probe as probe_mod

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            if bypass_check:
                probe_mod.bpf_privilege_problem = lambda status_path="": None
            logs: list[str] = []
            c = SchedCollector(CollectorContext(pids={os.getpid()}, log=logs.append))
            c.collect()
            out = {"source": c.source, "logs": logs, "euid": os.geteuid()}
            os.write(w, json.dumps(out).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, data
    result: dict[str, object] = json.loads(data)
    return result


@pytest.mark.root
@pytest.mark.apt
def test_unprivileged_process_falls_back_with_privilege_message():
    """After a real setuid(65534) (CapEff becomes 0) the choice made in that
    process is /proc, with one message naming the missing capabilities."""
    out = _in_child_as_nobody(bypass_check=False)
    assert out["euid"] == 65534 and out["source"] == "proc"
    logs = out["logs"]
    assert isinstance(logs, list) and len(logs) == 1
    assert "no-privilege" in logs[0] and "CAP_BPF" in logs[0], logs


@pytest.mark.root
@pytest.mark.apt
def test_kernel_refusal_without_privilege_also_falls_back():
    """With the capability pre-check bypassed, the kernel itself refuses
    the unprivileged load: the error is caught, the collector says so once
    and uses /proc."""
    out = _in_child_as_nobody(bypass_check=True)
    assert out["source"] == "proc"
    logs = out["logs"]
    assert isinstance(logs, list) and len(logs) == 1 and "compile" in logs[0], logs


@pytest.mark.root
@pytest.mark.apt
def test_broken_program_text_falls_back_with_compile_message():
    """A program that does not compile: one message tagged "compile", /proc
    backend, and collect() works; with source="ebpf" it raises instead."""
    logs: list[str] = []
    bad = "TRACEPOINT_PROBE(sched, sched_switch) { this is not C; }"
    c = SchedCollector(CollectorContext(pids={os.getpid()}, log=logs.append), program=bad)
    assert c.source == "proc" and c.fallback_reason is not None
    assert len(logs) == 1 and "compile" in logs[0], logs
    c.collect()
    time.sleep(0.05)
    assert all(e.signal == "sched_sample" for e in c.collect())
    with pytest.raises(ProbeError) as ei:
        SchedCollector(CollectorContext(options={"source": "ebpf"}), program=bad)
    assert ei.value.reason == "compile"


@pytest.mark.root
@pytest.mark.apt
def test_missing_tracepoint_is_an_attach_failure_not_a_crash():
    """A program on a tracepoint this kernel lacks compiles but cannot attach:
    reported as a compile/attach failure and the collector falls back."""
    logs: list[str] = []
    prog = "TRACEPOINT_PROBE(sched, no_such_tracepoint_aaco) { return 0; }"
    c = SchedCollector(CollectorContext(log=logs.append), program=prog)
    assert c.source == "proc" and len(logs) == 1 and "compile" in logs[0], logs

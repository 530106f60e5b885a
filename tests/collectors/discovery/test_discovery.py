"""Workload discovery on real processes: selectors, children, exits, the cap,
unreadable processes, and the collector's pid set and snapshot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from collectors.base import CollectorContext, create
from collectors.discovery import Discovery, Selectors

# A process that maps the onnxruntime wheel's library, then waits on stdin.
ORT_IDLE = "import onnxruntime, sys; print('ready', flush=True); sys.stdin.read()"
# The same, with one `sleep` child.
ORT_PARENT = ("import onnxruntime, subprocess, sys; p = subprocess.Popen(['sleep', '600']); "
              "print(p.pid, flush=True); sys.stdin.read(); p.kill()")


def _discovery(sel: Selectors, **kw: object) -> Discovery:
    """Discovery that may watch this test's children (by default the caller's
    whole process tree is excluded, as the exporter's own)."""
    return Discovery(sel, exclude={os.getpid()}, **kw)  # type: ignore[arg-type]


@contextmanager
def _spawn(argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    """Start ``argv`` and wait until it has exec'd (between fork and exec the
    child still has this process's comm, maps and environment)."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    want = Path(argv[0]).name.encode()
    for _ in range(500):
        try:
            if Path(Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
                    ).name.encode() == want:
                break
        except OSError:
            pass
        time.sleep(0.01)
    try:
        yield p
    finally:
        p.kill()
        p.wait(10)


def _named_sleep(tmp_path: Path, name: str) -> str:
    """A copy of sleep(1) whose comm is ``name`` (comm is the executable's name)."""
    exe = tmp_path / name
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    return str(exe)


def test_auto_finds_a_process_with_onnxruntime_mapped_and_not_a_plain_one() -> None:
    """auto: a Python process that imported onnxruntime is found (a runtime
    library is mapped); a plain `sleep` is not."""
    with _spawn([sys.executable, "-c", ORT_IDLE]) as ort, _spawn(["sleep", "600"]) as plain:
        assert ort.stdout is not None and ort.stdout.readline().strip() == "ready"
        found = _discovery(Selectors(auto=True)).scan()
        assert ort.pid in found
        assert found[ort.pid].reason.startswith("lib:")
        assert found[ort.pid].comm.startswith("python")
        assert plain.pid not in found


def test_children_of_a_watched_process_are_followed() -> None:
    """A discovered process's descendants are watched too, with reason child."""
    with _spawn([sys.executable, "-c", ORT_PARENT]) as parent:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        found = _discovery(Selectors(auto=True)).scan()
        assert found[parent.pid].reason.startswith("lib:")
        assert found[child].reason == "child"
        assert found[child].comm == "sleep"


def test_comm_selector_matches_by_regex(tmp_path: Path) -> None:
    """--watch-comm: processes whose comm matches are watched (auto off)."""
    name = f"aacosrv{uuid.uuid4().hex[:6]}"
    with _spawn([_named_sleep(tmp_path, name), "600"]) as p, _spawn(["sleep", "600"]) as other:
        found = _discovery(Selectors(auto=False, comm=f"^{name}$")).scan()
        assert set(found) == {p.pid}
        assert found[p.pid].reason == "comm" and found[p.pid].comm == name
        assert other.pid not in found


def test_exited_process_is_forgotten_and_never_raises() -> None:
    """A process that exits is absent from the next scan."""
    d = _discovery(Selectors(auto=False, comm="^sleep$"))
    with _spawn(["sleep", "600"]) as p:
        assert p.pid in d.scan()
    assert p.pid not in d.scan()


def test_cap_keeps_the_oldest_and_counts_each_left_out_process_once(tmp_path: Path) -> None:
    """max_watched: the oldest processes stay; each process left out is
    counted once however many scans see it."""
    name = f"aacocap{uuid.uuid4().hex[:6]}"
    exe = _named_sleep(tmp_path, name)
    with _spawn([exe, "600"]) as a, _spawn([exe, "601"]) as b, _spawn([exe, "602"]) as c:
        d = _discovery(Selectors(auto=False, comm=f"^{name}$"), max_watched=2)
        for _ in range(3):
            found = d.scan()
            assert set(found) == {a.pid, b.pid}, (a.pid, b.pid, c.pid)
        assert d.drops["max_watched"] == 1


def test_explicit_pid_wins_the_cap(tmp_path: Path) -> None:
    """An explicit --pid is kept before older discovered processes."""
    name = f"aacopid{uuid.uuid4().hex[:6]}"
    exe = _named_sleep(tmp_path, name)
    with _spawn([exe, "600"]) as old, _spawn(["sleep", "600"]) as mine:
        d = _discovery(Selectors(auto=False, comm=f"^{name}$", pids=(mine.pid,)),
                      max_watched=1)
        assert set(d.scan()) == {mine.pid}
        assert old.pid not in d.scan()
        assert d.drops["max_watched"] == 1


def test_own_process_tree_is_never_watched() -> None:
    """The exporter's own process and children (its nats-server) are excluded,
    even when a selector would pick them."""
    with _spawn(["sleep", "600"]) as child:
        found = Discovery(Selectors(auto=True, comm="^(python|sleep)")).scan()
        assert os.getpid() not in found
        assert child.pid not in found


@pytest.mark.root
def test_cgroup_selector_watches_the_cgroups_processes(tmp_path: Path) -> None:
    """--watch-cgroup: every process of a cgroup v2 directory (and below) is watched."""
    if os.geteuid() != 0:
        pytest.fail("needs root (CI runs as root)")
    roots = [Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")]
    root = next((r for r in roots if (r / "cgroup.procs").exists()
                 and (r / "cgroup.controllers").exists()), None)
    assert root is not None, "no cgroup v2 hierarchy mounted"
    name = f"aaco-test-{uuid.uuid4().hex[:8]}"
    cg = root / name / "inner"
    cg.mkdir(parents=True)
    try:
        with _spawn(["sleep", "600"]) as p, _spawn(["sleep", "600"]) as outside:
            (cg / "cgroup.procs").write_text(str(p.pid))
            # relative: looked up under /sys/fs/cgroup, then /sys/fs/cgroup/unified
            found = _discovery(Selectors(auto=False, cgroup=name)).scan()
            assert set(found) == {p.pid}
            assert found[p.pid].reason == "cgroup"
            assert outside.pid not in found
    finally:
        cg.rmdir()
        cg.parent.rmdir()


@pytest.mark.root
def test_unreadable_processes_are_counted_once_and_logged_once() -> None:
    """A scan by an unprivileged user cannot read root's processes: each is
    counted once in drops['unreadable'] and logged once, and scanning goes on."""
    if os.geteuid() != 0:
        pytest.fail("needs root (CI runs as root) to drop to nobody")
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from collectors.discovery import Discovery, Selectors;"
            "lines = [];"
            "d = Discovery(Selectors(auto=True), log=lines.append);"
            "d.scan(); first = d.drops['unreadable']; d.scan();"
            "print(first, d.drops['unreadable'], len(lines))")
    repo = str(Path(__file__).resolve().parents[3])
    with _spawn(["sleep", "600"]):  # at least one root process besides init
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              sys.executable, "-c", code, repo], capture_output=True,
                             text=True, timeout=60, check=True).stdout.split()
    first, second, logged = map(int, out)
    assert first >= 1
    assert second == first  # the same processes again: not counted twice
    assert logged == first


def test_collector_keeps_ctx_pids_equal_to_the_watched_set(tmp_path: Path) -> None:
    """The discovery collector adds found pids to the shared set, removes
    those that exit, never removes pids it did not add, and emits each scan's
    whole set as one process_info batch."""
    name = f"aacocol{uuid.uuid4().hex[:6]}"
    exe = _named_sleep(tmp_path, name)
    foreign = 999_999_999  # put there by someone else (an ORT collector, say)
    ctx = CollectorContext(host="h", pids={foreign}, options={"auto": False,
                                                             "comm": f"^{name}$"}, log=str)
    c = create("discovery", ctx)
    # started through a shell that exits: not a descendant of this process
    pid = int(subprocess.run(["sh", "-c", f"{exe} 600 >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout)
    try:
        emits = list(c.collect())
        assert ctx.pids == {foreign, pid}
        assert [e.signal for e in emits] == ["process_info"]
        rows = emits[0].batch.to_pylist()
        assert [(r["pid"], r["comm"], r["reason"]) for r in rows] == [(pid, name, "comm")]
    finally:
        os.kill(pid, 9)
    for _ in range(100):  # reaped by init
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.05)
    emits = list(c.collect())
    assert ctx.pids == {foreign}
    assert emits[0].batch.num_rows == 0  # the empty snapshot clears the host's set
    c.close()


def test_collector_rejects_a_bad_cap() -> None:
    """max_watched < 1 is a clear error naming the option."""
    with pytest.raises(ValueError, match="max_watched"):
        create("discovery", CollectorContext(options={"max_watched": 0}))


def test_an_unchanged_set_is_published_again_only_after_refresh_s(tmp_path: Path) -> None:
    """Scans that find the same set emit nothing until ``refresh_s`` has passed
    (then the snapshot again); a changed set is emitted at the next scan; with
    ``refresh_s = 0`` every scan emits."""
    name = f"aacoref{uuid.uuid4().hex[:6]}"
    exe = _named_sleep(tmp_path, name)
    opts = {"auto": False, "comm": f"^{name}$", "refresh_s": 30.0}
    c = create("discovery", CollectorContext(host="h", options=opts, log=str))
    every = create("discovery", CollectorContext(host="h", options={**opts, "refresh_s": 0.0},
                                                 log=str))
    signals = [[e.signal for e in c.collect()] for _ in range(3)]
    assert signals == [["process_info"], [], []]  # empty set, unchanged
    assert all(len(list(every.collect())) == 1 for _ in range(3))
    pid = int(subprocess.run(["sh", "-c", f"{exe} 600 >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout)
    try:
        emits = list(c.collect())  # changed: at once
        assert [r["pid"] for r in emits[0].batch.to_pylist()] == [pid]
        assert list(c.collect()) == []
        c._published_at -= 30.0  # as if refresh_s had passed
        emits = list(c.collect())
        assert [r["pid"] for r in emits[0].batch.to_pylist()] == [pid]
    finally:
        os.kill(pid, 9)


def test_collector_rejects_a_refresh_beyond_the_sinks_expiry() -> None:
    """refresh_s outside [0, 240] is a clear error naming the option."""
    for bad in (-1.0, 300.0):
        with pytest.raises(ValueError, match="refresh_s"):
            create("discovery", CollectorContext(options={"refresh_s": bad}))

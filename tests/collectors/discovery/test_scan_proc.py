"""``proc_entries`` reads ``/proc/PID/stat`` itself, once per process, and must
give what psutil gives: the name (psutil's rule for a 15-character ``comm``),
the parent, the state and the start time, on real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import psutil

from collectors.discovery.scan import proc_entries


def _psutil_view(pid: int) -> tuple[int, str, bool, int]:
    d = psutil.Process(pid).as_dict(["ppid", "name", "status", "create_time"])
    return (d["ppid"], d["name"], d["status"] == psutil.STATUS_ZOMBIE,
            int(d["create_time"] * 1e9))


def test_proc_entries_agree_with_psutil(tmp_path: Path) -> None:
    """This process, pid 1, a child with a 26-character name (comm cut at 15:
    the argv[0] basename, as psutil), one with a short name, one started
    with an argv[0] holding a space (``exec -a``) and a zombie: ppid, name,
    zombie state and start time in ns equal psutil's."""
    long_exe = tmp_path / "aaco-long-name-process-xyz"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", long_exe)
    kids = [subprocess.Popen([str(long_exe), "600"]), subprocess.Popen(["sleep", "600"]),
            subprocess.Popen(["bash", "-c", f"exec -a 'aaco-long-name-renamed x' {long_exe} 600"]),
            subprocess.Popen(["true"])]
    try:
        comms = {kids[0].pid: "aaco-long-name-", kids[1].pid: "sleep",
                 kids[2].pid: "aaco-long-name-"}
        for _ in range(500):  # until exec'd and `true` is a zombie (not waited for)
            if (all(Path(f"/proc/{p}/comm").read_text().strip() == c for p, c in comms.items())
                    and psutil.Process(kids[3].pid).status() == psutil.STATUS_ZOMBIE):
                break
            time.sleep(0.01)
        mine = {e.pid: e for e in proc_entries()}
        pids = [os.getpid(), 1, *(k.pid for k in kids)]
        for pid in pids:
            e = mine[pid]
            assert (e.ppid, e.name, e.state == "Z", e.create_ns) == _psutil_view(pid), pid
        assert mine[kids[0].pid].name == "aaco-long-name-process-xyz"
        assert mine[kids[1].pid].name == "sleep"
        assert mine[kids[2].pid].name == "aaco-long-name-renamed x"
        assert mine[kids[3].pid].state == "Z"
    finally:
        for k in kids:
            k.kill()
            k.wait()


def test_a_long_name_is_read_from_cmdline_once_per_process_start(tmp_path: Path) -> None:
    """With a ``names`` memo, a child with a 26-character name gets it from its
    ``cmdline`` on the first scan and from the memo (keyed by pid and start
    ticks) on the next: a value planted in the memo comes back, and the
    entries otherwise equal a scan without the memo. ``Discovery.scan``
    forgets a process's name once it has exited."""
    from collectors.discovery.scan import Discovery, Selectors

    long_exe = tmp_path / "aaco-long-name-process-xyz"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", long_exe)
    kid = subprocess.Popen([str(long_exe), "600"])
    try:
        for _ in range(500):
            if Path(f"/proc/{kid.pid}/comm").read_text().strip() == "aaco-long-name-":
                break
            time.sleep(0.01)
        names: dict[tuple[int, int], str] = {}
        first = {e.pid: e for e in proc_entries(names=names)}
        (ident,) = [i for i in names if i[0] == kid.pid]
        assert names[ident] == first[kid.pid].name == "aaco-long-name-process-xyz"
        names[ident] = "planted"
        again = {e.pid: e for e in proc_entries(names=names)}
        assert again[kid.pid].name == "planted"
        plain = {e.pid: e for e in proc_entries()}
        assert plain[kid.pid].name == "aaco-long-name-process-xyz"
        d = Discovery(Selectors(auto=False, comm="^aaco-long-name"), exclude=set())
        assert [t.reason for t in d.scan().values() if t.pid == kid.pid] == ["comm"]
        assert any(i[0] == kid.pid for i in d._names)
    finally:
        kid.kill()
        kid.wait()
    d.scan()
    assert not any(i[0] == kid.pid for i in d._names)

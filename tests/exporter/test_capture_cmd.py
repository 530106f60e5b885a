"""Process-tree discovery of `capture -- CMD` (exporter.capture_cmd.descendants)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from exporter.capture_cmd import descendants


def test_descendants_finds_grandchildren_of_a_real_process_tree() -> None:
    """A shell running `sleep` in a subshell: the subshell and its sleep are
    both found below the shell's pid."""
    sh = subprocess.Popen(["sh", "-c", "(sleep 30; true) & wait"])
    try:
        found: set[int] = set()
        for _ in range(50):  # until the subshell has forked its sleep
            found = descendants(sh.pid)
            if len(found) >= 3:
                break
            time.sleep(0.05)
        comms = {Path(f"/proc/{p}/comm").read_text().strip() for p in found - {sh.pid}}
        assert sh.pid in found and len(found) >= 3 and "sleep" in comms, (found, comms)
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(sh.pid)], check=False)
        sh.kill()
        sh.wait()


def test_descendants_never_raises_while_processes_exit_under_it() -> None:
    """A shell forking short-lived children without pause: 1000 scans while
    tasks appear and vanish never raise (a vanished task directory once
    ended a capture with exit 2) and always include the shell itself."""
    sh = subprocess.Popen(["sh", "-c", "while :; do /bin/true & /bin/true; done"])
    try:
        for _ in range(1000):
            assert sh.pid in descendants(sh.pid)
    finally:
        sh.kill()
        sh.wait()


def test_descendants_of_a_gone_pid_is_just_that_pid(tmp_path: Path) -> None:
    """A pid without a /proc entry yields itself and nothing else."""
    assert descendants(4242, proc=tmp_path) == {4242}

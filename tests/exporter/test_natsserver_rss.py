"""Peak RSS per process (issue 14): ``exporter.natsserver.vm_hwm`` reads a
process's own high-water mark, and ``replay`` records its own and
nats-server's in ``session.json``, not ``getrusage``: a process started with
vfork + exec begins with its parent's peak as its ``RUSAGE_SELF`` ``ru_maxrss``,
and ``RUSAGE_CHILDREN`` credits such a child (``platform.platform()``'s
``uname -p``) with the parent's peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.natsserver import EmbeddedNats, vm_hwm
from tests.exporter.replayed import ROCPROF, run_cli

MIB = 1 << 20
GROW = """
import sys
b = bytearray(200 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
del b
print("ready", flush=True)
sys.stdin.read()
"""


def test_vm_hwm_is_a_live_process_own_peak_after_it_freed_the_memory() -> None:
    """A child that touched 200 MiB and freed it: its VmHWM is at least 200 MiB;
    a pid that does not exist gives None."""
    p = subprocess.Popen([sys.executable, "-c", GROW], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        hwm = vm_hwm(p.pid)
        assert hwm is not None and hwm >= 200 * MIB
    finally:
        p.communicate("")
    assert vm_hwm(2**22 + 12345) is None


def test_rusage_children_credits_a_vforked_child_with_the_parent_peak() -> None:
    """Why session.json no longer reports RUSAGE_CHILDREN: in a fresh process
    that peaked at 200 MiB and freed it, ``platform.platform()`` (which runs
    ``uname -p``) makes RUSAGE_CHILDREN's ru_maxrss jump to that peak, although
    ``uname`` itself is a few MiB."""
    code = GROW.replace('print("ready", flush=True)\nsys.stdin.read()', """
import platform, resource
before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
platform.platform()
after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(before, after, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)""")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    before, after, own = (int(x) * 1024 for x in out)
    assert before < 50 * MIB
    assert after >= 200 * MIB and after <= own


def test_a_spawned_process_starts_with_its_parent_peak_as_ru_maxrss_not_as_vm_hwm() -> None:
    """Why the benchmark once reported a 3.1 GiB replay: a parent that peaked
    at 200 MiB starts a child; the child's own RUSAGE_SELF ru_maxrss is at
    least 200 MiB at once, its VmHWM a few tens of MiB."""
    code = GROW.replace('print("ready", flush=True)\nsys.stdin.read()', """
import subprocess
child = ("import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
         "open('/proc/self/status').read().split('VmHWM:')[1].split()[0])")
print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                     check=True).stdout)""")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    ru_maxrss, hwm = (int(x) * 1024 for x in out)
    assert ru_maxrss >= 200 * MIB
    assert hwm < 100 * MIB


def test_embedded_server_records_its_own_peak_when_stopped(tmp_path: Path) -> None:
    """stop() reads nats-server's VmHWM: set, and far below this Python process's."""
    srv = EmbeddedNats(tmp_path / "nats")
    assert srv.peak_rss_bytes is None
    srv.start()
    srv.stop()
    assert srv.peak_rss_bytes is not None
    assert 1 * MIB < srv.peak_rss_bytes < 500 * MIB


@pytest.mark.slow
def test_replay_session_json_has_own_peaks_of_python_and_nats_server(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """session.json peak_rss_bytes: ``self`` (the replay process) and
    ``nats_server`` (its own VmHWM), the server's well below the process's
    (the old ``children`` equalled ``self``)."""
    r = run_cli(["replay", str(ROCPROF / "kernel_trace.csv"), "--out", str(tmp_path),
                 "--quiet"], cli_env)
    assert r.returncode == 0, r.stderr
    bundle = Path(r.stdout.strip().splitlines()[-1])
    peak = json.loads((bundle / "session.json").read_text())["peak_rss_bytes"]
    assert set(peak) == {"self", "nats_server"}
    assert 0 < peak["nats_server"] < peak["self"] / 2

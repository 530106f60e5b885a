"""One sampling window: ``rocprofv3 --attach PID`` for a few seconds, then its
rocpd database read into kernel spans and deleted.

Command (rocprofiler-sdk *Dynamic process attachment*): ``rocprofv3 --attach
PID --attach-duration-msec N --attach-sync-output --kernel-trace
--hip-runtime-trace --marker-trace --output-format rocpd -d DIR -o window``;
``--attach-sync-output`` makes detach wait until the output is written, so
the database is complete when the tool exits.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from collectors.rocprof.clock import ClockMapper
from collectors.rocprof.rejects import Rejects


def attach_command(exe: str, pid: int, window_s: float, out_dir: Path) -> list[str]:
    """The argv of one window.

    >>> attach_command("rocprofv3", 42, 2.0, Path("/tmp/w"))[:5]
    ['rocprofv3', '--attach', '42', '--attach-duration-msec', '2000']
    """
    return [exe, "--attach", str(pid), "--attach-duration-msec", str(int(window_s * 1000)),
            "--attach-sync-output", "--kernel-trace", "--hip-runtime-trace", "--marker-trace",
            "--output-format", "rocpd", "-d", str(out_dir), "-o", "window"]


class WindowError(RuntimeError):
    """A window that produced nothing usable; ``reason`` is a bounded token."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Window:
    """A running (then finished) window of one target."""

    pid: int
    out_dir: Path
    proc: subprocess.Popen[bytes]
    start_ns: int = field(default_factory=time.time_ns)
    deadline: float = 0.0  # monotonic time after which it is killed
    end_ns: int = 0

    @classmethod
    def start(cls, exe: str, pid: int, window_s: float, out_dir: Path,
              timeout_s: float) -> Window:
        """Start ``rocprofv3`` (raises ``OSError`` when it cannot run)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(attach_command(exe, pid, window_s, out_dir),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        return cls(pid, out_dir, proc, deadline=time.monotonic() + window_s + timeout_s)

    def done(self) -> bool:
        """Whether the tool exited (or ran past its deadline and was killed)."""
        if self.proc.poll() is None and time.monotonic() > self.deadline:
            self.proc.kill()
            self.proc.wait(10)
        finished = self.proc.poll() is not None
        if finished and not self.end_ns:
            self.end_ns = time.time_ns()
        return finished

    def harvest(self, rejects: Rejects) -> list[pa.RecordBatch]:
        """Kernel spans of the finished window on the wall clock; the output
        directory is deleted whatever happens. Raises :class:`WindowError`."""
        # imported when used: the ADBC driver and pyarrow.dataset (~20 MB)
        from collectors.rocprof.rocpd import RocpdError, iter_kernel_spans

        try:
            if self.proc.returncode != 0:
                err = (self.proc.stderr.read() if self.proc.stderr else b"").decode(
                    errors="replace").strip().splitlines()
                raise WindowError("tool_exit", f"rocprofv3 --attach {self.pid} exited "
                                  f"{self.proc.returncode}: {err[-1] if err else ''}")
            dbs = sorted(self.out_dir.rglob("*.db"))
            if not dbs:
                raise WindowError("no_output", f"rocprofv3 --attach {self.pid} wrote no database")
            clock = ClockMapper()
            out = []
            for db in dbs:
                for b in iter_kernel_spans(db, rejects):
                    out.append(clock(b, (self.start_ns, self.end_ns or time.time_ns())))
            return out
        except RocpdError as e:
            raise WindowError("bad_output", str(e)) from None
        finally:
            if self.proc.stderr:
                self.proc.stderr.close()
            shutil.rmtree(self.out_dir, ignore_errors=True)

"""Fixtures for the sched collector tests: CPU hogs and per-pid SII."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stream_analytics.sii import SII
from tests.support import die_with_parent

HOG = "while True: pass"
GATED_HOG = "import sys\nsys.stdin.readline()\nwhile True: pass"


@contextmanager
def cpu_hogs(n: int, gated: bool = False) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` busy-looping Python processes, killed on exit (and by the kernel
    if this process dies first: :func:`tests.support.die_with_parent`). ``gated`` ones
    block reading a line from stdin before they spin (see :func:`release`)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            if gated:
                procs.append(subprocess.Popen([sys.executable, "-c", GATED_HOG],
                                              stdin=subprocess.PIPE, preexec_fn=die_with_parent))
            else:
                procs.append(subprocess.Popen([sys.executable, "-c", HOG],
                                              preexec_fn=die_with_parent))
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def release(procs: list[subprocess.Popen[bytes]]) -> None:
    """Let gated hogs start spinning."""
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()


def _sii_of(table: pa.Table, pid: int) -> float | None:
    return SII().update(table.filter(pc.equal(table.column("pid"), pid))).get()


def _col_sum(table: pa.Table, pid: int, name: str) -> int:
    v = pc.sum(table.filter(pc.equal(table.column("pid"), pid)).column(name)).as_py()
    return int(v or 0)


@pytest.fixture
def hogs() -> object:
    """``hogs(n)``: context manager running ``n`` busy-looping processes."""
    return cpu_hogs


@pytest.fixture
def release_hogs() -> object:
    """``release_hogs(procs)``: let gated hogs start spinning."""
    return release


@pytest.fixture
def sii_of() -> object:
    """``sii_of(table, pid)``: SII of one process's SCHED_SAMPLE rows."""
    return _sii_of


@pytest.fixture
def col_sum() -> object:
    """``col_sum(table, pid, column)``: a column summed over a pid's rows."""
    return _col_sum

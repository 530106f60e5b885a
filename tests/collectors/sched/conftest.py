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

HOG = "while True: pass"


@contextmanager
def cpu_hogs(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` busy-looping Python processes, killed on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", HOG]))
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


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
def sii_of() -> object:
    """``sii_of(table, pid)``: SII of one process's SCHED_SAMPLE rows."""
    return _sii_of


@pytest.fixture
def col_sum() -> object:
    """``col_sum(table, pid, column)``: a column summed over a pid's rows."""
    return _col_sum

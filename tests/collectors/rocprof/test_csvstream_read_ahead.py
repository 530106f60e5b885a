"""A CSV file read ahead by its reader thread (``csvstream.READ_AHEAD``) gives
exactly the rows, rejects and line numbers of the same bytes read in one
thread, through each of the stream's restarts, and leaves no thread behind."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa

from collectors.rocprof.csvstream import READ_AHEAD_MIN, CsvStream
from collectors.rocprof.kernels import SPECS
from collectors.rocprof.rejects import Rejects

TD = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"
FMT = "rocprofv3_kernel_trace"
BLOCK = 1 << 10


def _lines(n: int) -> list[bytes]:
    """The header and ``n`` data rows: the 4 real rows of
    ``kernel_trace_truncated.csv`` repeated, each copy with its own dispatch id."""
    head, *rows = (TD / "kernel_trace_truncated.csv").read_bytes().splitlines()
    out = [head]
    for i in range(n):
        f = rows[i % len(rows)].split(b",")
        f[5] = str(i + 1).encode()  # Dispatch_Id
        out.append(b",".join(f))
    return out


def _read(data: Path | bytes, name: str) -> tuple[pa.Table, Rejects, set[str]]:
    """Every batch of ``data`` as one table, the rejects, and the names of the
    threads alive while the first batch was being converted."""
    r = Rejects()
    seen: set[str] = set()
    batches = []
    for b in CsvStream(data, SPECS[FMT], r, name=name, block_size=BLOCK).batches():
        if not batches:
            seen = {t.name for t in threading.enumerate()}
        batches.append(b)
    return pa.Table.from_batches(batches), r, seen


def _no_reader_thread() -> bool:
    return not any(t.name == "csv-read" for t in threading.enumerate())


def test_read_ahead_gives_the_rows_rejects_and_lines_of_a_single_thread(tmp_path: Path) -> None:
    """300 rows over 38 blocks of 1 KiB, with a short line (row 40), a
    non-numeric timestamp (row 120: the reader restarts in safe mode), a short
    line holding bytes that are not UTF-8 (row 200: restarts again, bytes
    replaced) and a last line cut short: read from a file (ahead, in a
    "csv-read" thread) and from the same bytes in memory (one thread), the
    rows, every reject count and every example (file:line) are equal."""
    ls = _lines(300)
    ls[40] = b'"KERNEL_DISPATCH","Agent 4",1'
    f = ls[120].split(b",")
    f[10] = b"12abc"  # End_Timestamp
    ls[120] = b",".join(f)
    ls[200] = b'"KERNEL_DISPATCH",\xfa\xfb,1'
    data = b"\n".join(ls) + b"\n" + ls[7][:40]
    p = tmp_path / "read_ahead_synthetic_kernel_trace.csv"
    p.write_bytes(data)
    assert len(data) > 30 * BLOCK

    t_file, r_file, threads = _read(p, str(p))
    t_mem, r_mem, _ = _read(data, str(p))

    assert "csv-read" in threads  # the file was read ahead
    assert _no_reader_thread()
    assert t_file.equals(t_mem)
    assert r_file.counts == r_mem.counts == {"column_count": 2, "not_numeric": 1, "truncated": 1}
    assert r_file.examples == r_mem.examples
    assert r_file.examples["not_numeric"] == [
        f"{p}:121: not_numeric: column 'End_Timestamp' value '12abc'"]
    assert [e.split(": ")[0] for e in r_file.examples["column_count"]] == [f"{p}:41", f"{p}:201"]
    assert t_file.num_rows == 300 - 3
    assert t_file.column("_row").to_pylist() == sorted(t_file.column("_row").to_pylist())


def test_stopping_early_stops_the_reader_thread(tmp_path: Path) -> None:
    """A caller that takes one batch of a long file and closes the stream
    leaves no "csv-read" thread running."""
    p = tmp_path / "long_synthetic_kernel_trace.csv"
    p.write_bytes(b"\n".join(_lines(2000)) + b"\n")
    it = CsvStream(p, SPECS[FMT], Rejects(), block_size=BLOCK).batches()
    first = next(it)
    assert first.num_rows > 0
    assert not _no_reader_thread()
    it.close()
    assert _no_reader_thread()


def test_a_file_of_few_blocks_is_read_in_the_callers_thread(tmp_path: Path) -> None:
    """A file no larger than READ_AHEAD_MIN blocks starts no reader thread."""
    p = tmp_path / "small_synthetic_kernel_trace.csv"
    p.write_bytes(b"\n".join(_lines(4)) + b"\n")
    assert p.stat().st_size <= READ_AHEAD_MIN * BLOCK
    t, r, threads = _read(p, str(p))
    assert t.num_rows == 4 and r.counts == {}
    assert "csv-read" not in threads

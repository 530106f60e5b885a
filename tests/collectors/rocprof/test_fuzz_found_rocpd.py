"""Inputs the parser fuzzer found (benchmarks/fuzz_parsers.py) in the rocpd reader:
SQLite's untyped columns holding text, fractions or blobs where rocpd has integers,
HIP launch regions without timestamps or pid, and a corrupt schema whose SQLite error
message is not UTF-8, used to raise ArrowInvalid/ValueError/UnicodeDecodeError out of
``load_paths``. Now the value is null and counted (``not_numeric``/``missing_value``,
naming the file and column) or the file is ``unknown_format`` naming it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from collectors.rocprof import rocpd
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths
from tests.collectors.rocprof.rocpd_synthetic import DEFAULT_GUID, build_synthetic_rocpd

ENGINES = ["sqlite3"] + (["adbc"] if rocpd.HAVE_ADBC else [])
UUID = "_" + DEFAULT_GUID.replace("-", "_")


def _kernels(db: Path) -> tuple[int, Rejects]:
    r = Rejects()
    return sum(e.batch.num_rows for e in load_paths([db], r) if e.signal == "kernel_span"), r


def _edit(db: Path, sql: str, *args: object) -> None:
    con = sqlite3.connect(db)
    con.execute(sql.replace("{uuid}", UUID), args)
    con.commit()
    con.close()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("value", ["abc", 3.5, b"\x00\xff"])
def test_non_integer_dispatch_start_is_counted_not_numeric(
        tmp_path: Path, engine: str, value: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Text, a fraction or a blob as one dispatch's start (ArrowInvalid in the int64
    cast): that start is null, counted not_numeric naming the column, and the row is
    then dropped as missing_value; the other kernels are kept."""
    monkeypatch.setattr(rocpd, "ENGINE", engine)
    db = build_synthetic_rocpd(tmp_path / "r.db")
    base, _ = _kernels(db)
    _edit(db, "UPDATE rocpd_kernel_dispatch{uuid} SET start = ? WHERE rowid = 1", value)
    rows, r = _kernels(db)
    assert rows == base - 1
    assert r.counts["not_numeric"] == 1 and r.counts["missing_value"] == 1
    assert "'start_ns'" in r.examples["not_numeric"][0]
    assert r.examples["not_numeric"][0].startswith(str(db))


@pytest.mark.parametrize("column", ["corr_id", "pid"])
def test_launch_region_without_correlation_id_or_pid_is_a_missing_value(
        tmp_path: Path, column: str) -> None:
    """hipLaunchKernel regions whose event has no correlation id (ValueError casting
    nulls to the launch schema) or whose process has a non-numeric pid (null once
    counted not_numeric: int(NaN) in launch_indexes): the calls are dropped as
    missing_value, every kernel is kept."""
    db = build_synthetic_rocpd(tmp_path / "r.db")
    base, _ = _kernels(db)
    if column == "pid":
        _edit(db, "UPDATE rocpd_info_process{uuid} SET pid = 'abc'")
    else:
        _edit(db, "UPDATE rocpd_event{uuid} SET correlation_id = NULL")
    rows, r = _kernels(db)
    assert rows == base
    assert r.counts.get("missing_value", 0) >= 1


def test_corrupt_schema_with_non_utf8_message_is_unknown_format(tmp_path: Path) -> None:
    """'CREATE \\x83ABLE' in sqlite_master: SQLite's 'malformed schema' message holds the
    byte and Python's sqlite3 raised UnicodeDecodeError while detecting the format."""
    db = build_synthetic_rocpd(tmp_path / "s.db")
    b = db.read_bytes()
    i = b.index(b"CREATE TABLE")
    bad = tmp_path / "results.db"
    bad.write_bytes(b[:i] + b"CREATE \x83ABLE" + b[i + 12:])
    rows, r = _kernels(bad)
    assert rows == 0
    assert r.counts == {"unknown_format": 1}
    assert r.examples["unknown_format"][0].startswith(str(bad))

"""`aaco-exporter replay` of rocpd databases (SYNTHETIC, from the real schema SQL and
real CSV rows: tests/collectors/rocprof/rocpd_synthetic.py), and of input it cannot use."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.collectors.rocprof.rocpd_synthetic import build_synthetic_rocpd

EXE = str(Path(sys.executable).parent / "aaco-exporter")


def _replay(path: Path, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "replay", str(path), "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.slow
def test_replay_of_a_rocpd_database_matches_its_kernels_view_to_the_nanosecond(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Per kernel: calls and total ns in the bundle equal the database's own
    `kernels` view (GROUP BY name), over two processes."""
    db = build_synthetic_rocpd(tmp_path / "results.db", (11, 22), counters=True)
    r = _replay(db, tmp_path / "out", cli_env)
    assert r.returncode == 0, r.stderr
    session = Path(r.stdout.strip().splitlines()[-1])
    got = {row["kernel_name"]: (row["calls"], row["total_ns"]) for row in
           pq.read_table(session / "profiler/kernel_stats.parquet").to_pylist()}
    with sqlite3.connect(db) as con:
        want = {name: (n, ns) for name, n, ns in con.execute(
            "SELECT name, count(*), sum(end - start) FROM kernels GROUP BY name")}
    assert got == want


@pytest.mark.parametrize("content", [b"", b"not a database at all\n",
                                     b"SQLite format 3\x00" + b"\x01" * 100])
def test_replay_of_an_empty_or_garbage_db_exits_2_naming_the_file(
        tmp_path: Path, cli_env: dict[str, str], content: bytes) -> None:
    bad = tmp_path / "7_results.db"
    bad.write_bytes(content)
    r = _replay(bad, tmp_path / "out", cli_env)
    assert r.returncode == 2 and str(bad) in r.stderr, r.stderr
    assert r.stderr.count("error:") == 1 and not (tmp_path / "out").exists()


def test_replay_of_an_unsupported_rocpd_version_exits_2_naming_version_and_file(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    db = build_synthetic_rocpd(tmp_path / "new.db", schema_version="4")
    r = _replay(db, tmp_path / "out", cli_env)
    assert r.returncode == 2 and "schema_version 4 is not supported" in r.stderr
    assert str(db) in r.stderr

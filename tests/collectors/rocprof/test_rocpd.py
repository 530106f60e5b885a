"""rocpd reader (collectors/rocprof/rocpd.py) on SYNTHETIC databases built from the
real rocprofiler-sdk schema SQL and the real CSV fixtures (rocpd_synthetic.py)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from collectors.rocprof import rocpd
from collectors.rocprof.follow import DirFollower
from collectors.rocprof.formats import UnknownFormat, detect
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths
from tests.collectors.rocprof.rocpd_synthetic import TESTDATA, build_synthetic_rocpd

ENGINES = ["sqlite3"] + (["adbc"] if rocpd.HAVE_ADBC else [])


def _spans(db: Path, engine: str | None = None, **kw: object) -> pa.Table:
    r = Rejects()
    t = pa.Table.from_batches(list(rocpd.iter_kernel_spans(
        db, r, engine=engine, **kw)))  # type: ignore[arg-type]
    assert r.total == 0, r.examples
    return t


@pytest.mark.parametrize("engine", ENGINES)
def test_kernel_calls_and_total_ns_equal_the_databases_own_kernels_view(
        tmp_path: Path, engine: str) -> None:
    """Per (pid, kernel name): count and sum(end - start) of the spans equal
    the database's `kernels` view, for a two-process database with counters."""
    db = build_synthetic_rocpd(tmp_path / "r.db", (100, 200), counters=True)
    t = _spans(db, engine, batch_rows=5)  # several batches
    got: dict[tuple[int, str], list[int]] = {}
    for row in t.select(["pid", "kernel_name", "duration_ns"]).to_pylist():
        g = got.setdefault((row["pid"], row["kernel_name"]), [0, 0])
        g[0] += 1
        g[1] += row["duration_ns"]
    with sqlite3.connect(db) as con:
        want = {(pid, name): [n, ns] for pid, name, n, ns in con.execute(
            "SELECT pid, name, count(*), sum(end - start) FROM kernels GROUP BY pid, name")}
    assert got == want and len({p for p, _ in want}) == 2


def test_each_process_of_a_multi_process_database_keeps_its_dispatches_and_launches(
        tmp_path: Path) -> None:
    """Correlation and dispatch ids restart per process: none is dropped as a
    duplicate and each process joins its own hipLaunchKernel (correlation id 5).
    ``t0`` puts both recorded files (two runs, days apart) on one clock, so
    that call is a plausible launch of dispatch 5."""
    db = build_synthetic_rocpd(tmp_path / "r.db", (100, 200), t0=1_550_151_853_000_000)
    t = _spans(db)
    kernels = sum(1 for _ in (TESTDATA / "kernel_trace.csv").open()) - 1
    assert t.num_rows == 2 * kernels
    joined = [(r["pid"], r["correlation_id"]) for r in t.to_pylist()
              if r["launch_api_ns"] is not None]
    assert sorted(joined) == [(100, 5), (200, 5)]


def test_launch_join_equals_the_csv_paths_for_the_same_rows(tmp_path: Path) -> None:
    """The same kernel and HIP API rows, once as rocprofv3 CSVs (joined by
    launch.py) and once in a rocpd database: identical spans, launch columns
    included. The two recorded files come from runs 4.1 days apart: both paths
    refuse the one correlation-id match (dispatch 5) and note it as
    ``launch_mismatch``."""
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    shutil.copy(TESTDATA / "kernel_trace.csv", csv_dir / "x_kernel_trace.csv")
    shutil.copy(TESTDATA / "api/hip_runtime_trace.csv", csv_dir / "x_hip_api_trace.csv")
    csv_rejects, db_rejects = Rejects(), Rejects()
    from_csv = pa.Table.from_batches([e.batch for e in load_paths([csv_dir], csv_rejects)])
    db = build_synthetic_rocpd(tmp_path / "r.db", (834304,))
    from_db = pa.Table.from_batches([e.batch for e in load_paths([db], db_rejects)
                                     if e.signal == "kernel_span"])
    cols = ["dispatch_id", "correlation_id", "start_ns", "end_ns", "duration_ns", "tid",
            "stream_id", "grid_x", "grid_y", "grid_z", "workgroup_x", "workgroup_y",
            "workgroup_z", "launch_api_ns", "launch_delay_ns"]
    a = from_csv.sort_by("dispatch_id")
    b = from_db.sort_by("dispatch_id")
    assert a.select(cols).to_pylist() == b.select(cols).to_pylist()
    for c in ("kernel_name", "kernel_family", "source", "agent_id"):
        assert a[c].cast(b[c].type).to_pylist() == b[c].to_pylist()
    assert b["launch_api_ns"].null_count == b.num_rows
    assert csv_rejects.notes["launch_mismatch"] == db_rejects.notes["launch_mismatch"] == 1


def test_unsupported_schema_version_is_one_clear_error_naming_version_and_file(
        tmp_path: Path) -> None:
    db = build_synthetic_rocpd(tmp_path / "old.db", schema_version="2")
    with pytest.raises(rocpd.RocpdError) as e:
        list(rocpd.iter_kernel_spans(db, Rejects()))
    assert str(db) in str(e.value) and "schema_version 2 is not supported" in str(e.value)
    r = Rejects()
    assert list(load_paths([db], r)) == []  # replay counts it, never raises
    assert r.counts == {"unknown_format": 1} and "schema_version 2" in r.examples[
        "unknown_format"][0]


def test_sqlite_files_are_told_apart_by_magic_and_rocpd_tables(tmp_path: Path) -> None:
    """A rocpd database is detected; a plain SQLite file, an empty file and
    garbage named .db are unknown formats naming the file."""
    assert detect(build_synthetic_rocpd(tmp_path / "r.db")) == "rocpd"
    plain = tmp_path / "plain.db"
    sqlite3.connect(plain).execute("CREATE TABLE t (a)").connection.commit()
    (tmp_path / "empty.db").write_bytes(b"")
    (tmp_path / "junk.db").write_bytes(b"SQLite format 3\x00" + b"\x07" * 200)
    for name, why in (("plain.db", "without rocpd tables"), ("empty.db", "empty"),
                      ("junk.db", "unreadable SQLite")):
        with pytest.raises(UnknownFormat, match=why) as e:
            detect(tmp_path / name)
        assert str(tmp_path / name) in str(e.value)


def test_reading_is_read_only_and_never_creates_a_database(tmp_path: Path) -> None:
    db = build_synthetic_rocpd(tmp_path / "r.db")
    before = (db.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir()))
    _spans(db)
    assert (db.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir())) == before
    assert rocpd.ro_uri(db).endswith("?mode=ro")
    with pytest.raises(rocpd.RocpdError, match=r"missing\.db"):
        rocpd.schema_version(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_api_marker_memcopy_and_counter_tables_hold_the_recorded_rows(
        tmp_path: Path, engine: str) -> None:
    db = build_synthetic_rocpd(tmp_path / "r.db", counters=True)

    def n(rel: str) -> int:
        return sum(1 for _ in (TESTDATA / rel).open()) - 1

    api = rocpd.read_table(db, "api_calls", engine=engine)
    assert api.num_rows == n("api/hip_runtime_trace.csv")
    assert set(api["domain"].to_pylist()) == {"HIP_RUNTIME_API_EXT"}
    marks = rocpd.read_table(db, "markers", engine=engine)
    assert marks.num_rows == n("api/marker_api_trace.csv")
    assert {"start_ns", "end_ns", "pid", "tid", "name"} <= set(marks.column_names)
    assert rocpd.read_table(db, "memory_copies", engine=engine).num_rows == n(
        "memory_copy_trace.csv")
    pmc = rocpd.read_table(db, "counters", engine=engine)
    assert pmc["counter_value"].to_pylist() == [16384.0] * n("counter_collection.csv")


def test_the_follower_reads_a_db_once_only_when_complete(tmp_path: Path) -> None:
    """Not while a -journal sidecar exists, not while its size/mtime changes,
    not before settle_s of stability; then once (keys stable), never again."""
    now = [0.0]
    f = DirFollower(tmp_path, settle_s=2.0, clock=lambda: now[0])
    (tmp_path / "h").mkdir()
    db = build_synthetic_rocpd(tmp_path / "h" / "1_results.db")
    journal = db.with_name(db.name + "-journal")
    journal.write_bytes(b"x")
    for t in (0.0, 5.0, 10.0):
        now[0] = t
        assert f.poll() == []
    journal.unlink()
    now[0] = 11.0
    assert f.poll() == []  # first seen complete-looking: starts settling
    with db.open("ab") as fh:  # still changing
        fh.write(b"\0" * 16)
    now[0] = 13.5
    assert f.poll() == []
    now[0] = 14.0
    assert f.poll() == []
    now[0] = 15.6
    emits = f.poll()
    assert sum(e.batch.num_rows for e in emits) == 9 and emits[0].key.startswith(
        f"rocprof:{db}:db")
    now[0] = 30.0
    assert f.poll() == []

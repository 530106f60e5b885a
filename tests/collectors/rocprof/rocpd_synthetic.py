"""SYNTHETIC rocpd databases for tests: the real schema, recorded rows, assembled here.

No real rocprofv3 ``.db`` is public. :func:`build_synthetic_rocpd` creates one the way
rocprofiler-sdk does: it runs the *real* schema SQL copied into
``collectors/rocprof/testdata/rocpd-schema/`` (tables, indexes, then the rocpd, data,
summary and marker views, in the order of rocprofiler-sdk's ``rocpd/schema.py``) with
``{{guid}}`` replaced by a guid (``00000450-565d-765d-bc41-19a2073d19ee`` form) and
``{{uuid}}`` by ``"_" + guid`` with ``-`` turned into ``_`` (the table names of real
databases, e.g. ``rocpd_kernel_dispatch_00000450_565d_765d_bc41_19a2073d19ee``).
The rows are the REAL rocprofv3 CSV fixtures of ``collectors/rocprof/testdata``:

* ``kernel_trace.csv`` -> ``rocpd_kernel_dispatch`` (+ kernel symbols, queues, streams,
  agents, threads, one ``rocpd_event`` per dispatch with its correlation id);
* ``api/hip_runtime_trace.csv`` -> ``rocpd_region`` + ``rocpd_event``, category =
  the CSV ``Domain`` (``HIP_RUNTIME_API_EXT``; ``rocpd convert`` writes a region's
  category back as ``Domain``, see the real ``rocpd-to-csv.csv`` fixture);
* ``api/marker_api_trace.csv`` -> regions of category ``MARKER_CORE_API``;
* ``memory_copy_trace.csv`` -> ``rocpd_memory_copy`` (name = ``Direction``; the CSV has
  no byte count, so ``size`` is 0);
* ``counter_collection.csv`` (``counters=True``) -> its dispatches as more kernel
  dispatches plus ``rocpd_info_pmc`` / ``rocpd_pmc_event`` values.

The recorded files come from different runs; in the database they all belong to each
process given. What is synthetic is only this assembly (and ``copies``: time-shifted
copies for benchmarks). Stdlib only: the rocprofv3 test double runs it with any python3.
"""

from __future__ import annotations

import csv
import itertools
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

TESTDATA = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"
SCHEMA_DIR = TESTDATA / "rocpd-schema"
SCRIPTS = ("rocpd_tables.sql", "rocpd_indexes.sql", "rocpd_views.sql", "data_views.sql",
           "summary_views.sql", "marker_views.sql")
DEFAULT_GUID = "00000450-565d-765d-bc41-19a2073d19ee"
LAUNCH_REGION = "hipLaunchKernel"  # region_name_id of every dispatch


def rows(path: Path) -> list[dict[str, str]]:
    """The records of a recorded CSV."""
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def schema_sql(guid: str) -> str:
    """The real schema scripts with ``{{uuid}}``/``{{guid}}`` filled in."""
    uuid = "_" + guid.replace("-", "_")
    text = "\n".join((SCHEMA_DIR / s).read_text() for s in SCRIPTS)
    return text.replace("{{uuid}}", uuid).replace("{{guid}}", guid)


class _Tables:
    """A connection whose ``INSERT INTO rocpd_x``/``UPDATE rocpd_x`` go to the
    ``rocpd_x<uuid>`` tables (the ``rocpd_x`` names are views, not insertable)."""

    def __init__(self, con: sqlite3.Connection, guid: str) -> None:
        self.con = con
        self.uuid = "_" + guid.replace("-", "_")

    def _sql(self, sql: str) -> str:
        return re.sub(r"^(INSERT INTO|UPDATE) (rocpd_\w+)", rf"\1 \2{self.uuid}", sql)

    def execute(self, sql: str, args: Sequence[object] = ()) -> None:
        self.con.execute(self._sql(sql), args)

    def executemany(self, sql: str, args: Iterable[Sequence[object]]) -> None:
        self.con.executemany(self._sql(sql), args)


class _Writer:
    def __init__(self, con: _Tables) -> None:
        self.con = con
        self.strings: dict[str, int] = {}
        self.event_id = itertools.count(1)
        self.events: list[tuple[int, int, int]] = []

    def string(self, s: str) -> int:
        if s not in self.strings:
            self.strings[s] = len(self.strings) + 1
            self.con.execute("INSERT INTO rocpd_string (id, string) VALUES (?, ?)",
                             (self.strings[s], s))
        return self.strings[s]

    def event(self, category: str, corr: int) -> int:
        eid = next(self.event_id)
        self.events.append((eid, self.string(category), corr))
        return eid

    def flush_events(self) -> None:
        self.con.executemany("INSERT INTO rocpd_event (id, category_id, correlation_id) "
                             "VALUES (?, ?, ?)", self.events)
        self.events.clear()


def _agent(v: str) -> int:
    return int(v.split()[-1])


def build_synthetic_rocpd(
    path: Path,
    pids: Sequence[int] = (834304,),
    *,
    guid: str = DEFAULT_GUID,
    copies: int = 1,
    counters: bool = False,
    t0: int | None = None,
    schema_version: str | None = None,
    markers: Path | None = None,
) -> Path:
    """Write a SYNTHETIC rocpd database at ``path`` (see the module doc).

    ``pids``: one process per pid, each holding all the recorded rows (ids stay per
    process, as in a real multi-process database). ``copies``: the kernel and HIP
    rows repeated, each copy shifted by the recorded span in time and by the largest
    id in correlation/dispatch ids. ``t0``: move each recorded file's times so its
    first start is ``t0`` (as the rocprofv3 test double does). ``schema_version``
    overrides ``rocpd_metadata.schema_version`` (to test unsupported versions).
    ``markers``: a marker trace CSV to use instead of ``api/marker_api_trace.csv``
    (e.g. ``roctx_synthetic/marker_api_trace.csv``, ranges around the kernels)."""
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    db.executescript(schema_sql(guid))
    con = _Tables(db, guid)
    if schema_version is not None:
        con.execute("UPDATE rocpd_metadata SET value = ? WHERE tag = 'schema_version'",
                    (schema_version,))
    w = _Writer(con)
    kern = rows(TESTDATA / "kernel_trace.csv")
    hip = rows(TESTDATA / "api" / "hip_runtime_trace.csv")
    marks = rows(markers or TESTDATA / "api" / "marker_api_trace.csv")
    mcopy = rows(TESTDATA / "memory_copy_trace.csv")
    pmc = rows(TESTDATA / "counter_collection.csv") if counters else []

    def shift(recs: list[dict[str, str]]) -> int:
        if t0 is None or not recs:
            return 0
        return t0 - min(int(r["Start_Timestamp"]) for r in recs)

    k_off, h_off, m_off, c_off, p_off = (shift(x) for x in (kern, hip, marks, mcopy, pmc))
    span = max(int(r["End_Timestamp"]) for r in kern) - min(int(r["Start_Timestamp"])
                                                             for r in kern) + 1000
    max_corr = max(int(r["Correlation_Id"]) for r in kern + hip)
    max_disp = max(int(r["Dispatch_Id"]) for r in kern)
    con.execute("INSERT INTO rocpd_info_node (id, hash, machine_id, hostname) "
                "VALUES (1, 1, 'synthetic', 'synthetic')")
    launch_name = w.string(LAUNCH_REGION)
    thread_ids: dict[tuple[int, int], int] = {}
    for p, pid in enumerate(pids):
        proc = p + 1
        con.execute("INSERT INTO rocpd_info_process (id, nid, pid, command) "
                    "VALUES (?, 1, ?, 'synthetic')", (proc, pid))

        def thread(tid: int, proc: int = proc, pid: int = pid) -> int:
            if (proc, tid) not in thread_ids:
                thread_ids[(proc, tid)] = len(thread_ids) + 1
                con.execute("INSERT INTO rocpd_info_thread (id, nid, pid, tid) "
                            "VALUES (?, 1, ?, ?)", (thread_ids[(proc, tid)], proc, tid))
            return thread_ids[(proc, tid)]

        agent_names = {r["Agent_Id"] for r in kern + pmc} | {
            a for r in mcopy for a in (r["Source_Agent_Id"], r["Destination_Agent_Id"])}
        agents = {}
        for name in sorted(agent_names, key=_agent):
            n = _agent(name)
            agents[name] = p * 100 + n + 1
            con.execute("INSERT INTO rocpd_info_agent (id, nid, pid, type, absolute_index, "
                        "logical_index, type_index, name) VALUES (?, 1, ?, ?, ?, ?, ?, ?)",
                        (agents[name], proc, "CPU" if n == 0 else "GPU", n, n, n, name))
        qids = {int(r["Queue_Id"]) for r in kern + pmc}
        sids = {int(r.get("Stream_Id") or 0) for r in kern + mcopy + pmc}
        for q in sorted(qids):
            con.execute("INSERT INTO rocpd_info_queue (id, nid, pid, name) VALUES (?, 1, ?, ?)",
                        (p * 1000 + q, proc, f"Queue {q}"))
        for s in sorted(sids):
            con.execute("INSERT INTO rocpd_info_stream (id, nid, pid, name) "
                        "VALUES (?, 1, ?, ?)", (p * 1000 + s, proc, f"Stream {s}"))
        con.execute("INSERT INTO rocpd_info_code_object (id, nid, pid, agent_id, uri) "
                    "VALUES (?, 1, ?, ?, 'synthetic')", (proc, proc, agents[kern[0]["Agent_Id"]]))
        symbols: dict[str, int] = {}
        for r in kern + pmc:
            if r["Kernel_Name"] not in symbols:
                symbols[r["Kernel_Name"]] = p * 1000 + int(r["Kernel_Id"])
                con.execute(
                    "INSERT INTO rocpd_info_kernel_symbol (id, nid, pid, code_object_id, "
                    "kernel_name, display_name, arch_vgpr_count, accum_vgpr_count, sgpr_count) "
                    "VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?)",
                    (symbols[r["Kernel_Name"]], proc, proc, r["Kernel_Name"], r["Kernel_Name"],
                     r.get("VGPR_Count"), r.get("Accum_VGPR_Count"), r.get("SGPR_Count")))
        for r in kern:
            thread(int(r["Thread_Id"]))
        for r in hip + marks:
            thread(int(r["Thread_Id"]))
        main_tid = thread(int(kern[0]["Thread_Id"]))

        def dispatches(copy: int, proc: int = proc, p: int = p,
                       symbols: dict[str, int] = symbols,
                       agents: dict[str, int] = agents) -> Iterator[tuple[object, ...]]:
            for r in kern:
                dt = k_off + copy * span
                corr = int(r["Correlation_Id"]) + copy * max_corr
                yield (proc, thread_ids[(proc, int(r["Thread_Id"]))], agents[r["Agent_Id"]],
                       symbols[r["Kernel_Name"]], int(r["Dispatch_Id"]) + copy * max_disp,
                       p * 1000 + int(r["Queue_Id"]), p * 1000 + int(r["Stream_Id"]),
                       int(r["Start_Timestamp"]) + dt, int(r["End_Timestamp"]) + dt,
                       r["Scratch_Size"], r["LDS_Block_Size"],
                       *(int(r[f"Workgroup_Size_{a}"]) for a in "XYZ"),
                       *(int(r[f"Grid_Size_{a}"]) for a in "XYZ"),
                       launch_name, w.event("KERNEL_DISPATCH", corr))

        def regions(copy: int, proc: int = proc) -> Iterator[tuple[object, ...]]:
            for recs, off in ((hip, h_off), (marks, m_off)):
                if recs is marks and copy:
                    continue
                for r in recs:
                    dt = off + (copy * span if recs is hip else 0)
                    corr = int(r["Correlation_Id"]) + (copy * max_corr if recs is hip else 0)
                    yield (proc, thread_ids[(proc, int(r["Thread_Id"]))],
                           int(r["Start_Timestamp"]) + dt, int(r["End_Timestamp"]) + dt,
                           w.string(r["Function"]), w.event(r["Domain"], corr))

        for copy in range(copies):
            k = list(dispatches(copy))
            g = list(regions(copy))
            w.flush_events()
            con.executemany(
                "INSERT INTO rocpd_kernel_dispatch (nid, pid, tid, agent_id, kernel_id, "
                "dispatch_id, queue_id, stream_id, start, end, private_segment_size, "
                "group_segment_size, workgroup_size_x, workgroup_size_y, workgroup_size_z, "
                "grid_size_x, grid_size_y, grid_size_z, region_name_id, event_id) "
                "VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", k)
            con.executemany("INSERT INTO rocpd_region (nid, pid, tid, start, end, name_id, "
                            "event_id) VALUES (1, ?, ?, ?, ?, ?, ?)", g)
        mc = [(proc, main_tid, int(r["Start_Timestamp"]) + c_off,
               int(r["End_Timestamp"]) + c_off, w.string(r["Direction"]),
               agents[r["Destination_Agent_Id"]], agents[r["Source_Agent_Id"]],
               p * 1000 + int(r["Stream_Id"]), w.event("MEMORY_COPY", int(r["Correlation_Id"])))
              for r in mcopy]
        w.flush_events()
        con.executemany("INSERT INTO rocpd_memory_copy (nid, pid, tid, start, end, name_id, "
                        "dst_agent_id, src_agent_id, size, stream_id, event_id) "
                        "VALUES (1, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)", mc)
        _counters(con, w, pmc, p_off, proc, p, agents, symbols, thread, copies * max_disp)
    con.execute("INSERT INTO rocpd_metadata (tag, value) VALUES ('synthetic', "
                "'built by tests/collectors/rocprof/rocpd_synthetic.py')")
    db.commit()
    db.close()
    return path


def _counters(con: _Tables, w: _Writer, pmc: list[dict[str, str]], off: int,
              proc: int, p: int, agents: dict[str, int], symbols: dict[str, int],
              thread: object, disp_off: int) -> None:
    """counter_collection.csv rows: each (dispatch) once as a kernel dispatch (its id
    moved past the kernel trace's by ``disp_off``: the two files are different runs),
    each counter value as a ``rocpd_pmc_event`` of that dispatch's event."""
    assert callable(thread)
    pmc_ids: dict[str, int] = {}
    seen: dict[int, int] = {}
    for r in pmc:
        name = r["Counter_Name"]
        if name not in pmc_ids:
            pmc_ids[name] = p * 1000 + len(pmc_ids) + 1
            con.execute("INSERT INTO rocpd_info_pmc (id, nid, pid, agent_id, name, symbol) "
                        "VALUES (?, 1, ?, ?, ?, ?)",
                        (pmc_ids[name], proc, agents[r["Agent_Id"]], name, name))
        d = int(r["Dispatch_Id"]) + disp_off
        if d not in seen:
            seen[d] = w.event("KERNEL_DISPATCH", int(r["Correlation_Id"]))
            w.flush_events()
            con.execute(
                "INSERT INTO rocpd_kernel_dispatch (nid, pid, tid, agent_id, kernel_id, "
                "dispatch_id, queue_id, stream_id, start, end, workgroup_size_x, "
                "workgroup_size_y, workgroup_size_z, grid_size_x, grid_size_y, grid_size_z, "
                "region_name_id, event_id) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 1, ?, "
                "1, 1, ?, ?)",
                (proc, thread(int(r["Thread_Id"])), agents[r["Agent_Id"]],
                 symbols[r["Kernel_Name"]], d, p * 1000 + int(r["Queue_Id"]), p * 1000,
                 int(r["Start_Timestamp"]) + off, int(r["End_Timestamp"]) + off,
                 int(r["Workgroup_Size"]), int(r["Grid_Size"]), w.string(LAUNCH_REGION),
                 seen[d]))
        con.execute("INSERT INTO rocpd_pmc_event (event_id, pmc_id, value) VALUES (?, ?, ?)",
                    (seen[d], pmc_ids[name], float(r["Counter_Value"])))

"""Live follow of a directory rocprofv3 writes into.

:class:`DirFollower` remembers, per CSV file under ``root`` (recursive), its
header and the byte offset up to which it has been consumed. Each
:meth:`~DirFollower.poll` reads only the *complete* new lines (up to the
last ``\\n``; a partial last line waits for the next poll), prepends the
header and parses that chunk with the same columnar parsers as replay. HIP
API traces are read before kernel traces so kernels join to launches seen
so far in the same directory with the same run prefix (launch table capped
at ``max_launches`` newest ids). Marker traces (``*marker_api_trace.csv``)
are read first of all: their iteration ranges
(:mod:`collectors.rocprof.markers`) are emitted as ``iteration_span``
(``source`` ``roctx``, ``kernel_count`` 0: their kernels come later) and set
the iteration of kernels read afterwards of the same run (the newest
``max_ranges`` ranges are kept); kernels whose range is written after them
are joined online by the engine. Overlap between ranges is checked within
one read chunk. A file that
shrinks (rewritten) is re-read from the start. Emit keys are
``"rocprof:<file>:<byte offset>:<i>"``: the same bytes always get the same
key, so a re-publish after a restart is deduplicated by JetStream.

rocpd databases (``*.db``) are read once, whole, and only when complete
(:func:`db_complete`): no ``-journal``/``-wal`` sidecar (SQLite keeps one while
a write transaction is open) and the same size and mtime for ``settle_s``
seconds (default 2) over successive polls; an empty file is never complete.
Reading opens them read-only (:mod:`collectors.rocprof.rocpd`). Keys are
``"rocprof:<file>:db<mtime ns>:<i>"``; a database that changes after it was
read (rocprofv3 does not rewrite its output) is read again. One with an
unsupported schema version is counted (``unknown_format``) and skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from collectors.base import Emit
from collectors.rocprof.csvstream import bytes_source, read_header
from collectors.rocprof.formats import detect_header
from collectors.rocprof.kernels import SPECS, iter_csv_kernel_spans
from collectors.rocprof.launch import LaunchIndex, launch_calls, read_api_trace
from collectors.rocprof.markers import (
    attribute_kernels,
    is_marker_trace,
    iteration_ranges,
    join_batches,
    read_marker_regions,
)
from collectors.rocprof.rejects import Rejects
from exporter.schema import conform

SIDECARS = ("-journal", "-wal")
"""SQLite files beside ``X.db`` (``X.db-journal``, ``X.db-wal``) while it is written."""


def has_sidecar(db: Path) -> bool:
    """Whether a rollback journal or WAL file sits beside ``db``."""
    return any(db.with_name(db.name + s).exists() for s in SIDECARS)


def db_complete(db: Path, seen: tuple[int, int, float] | None, now: float,
                settle_s: float) -> tuple[bool, tuple[int, int, float] | None]:
    """Completeness rule for a rocpd database rocprofv3 may still be writing.

    ``seen`` is what the previous call returned (``(size, mtime_ns, since)``);
    returns ``(complete, new seen)``. Complete = no sidecar (:func:`has_sidecar`),
    size > 0, and size and mtime unchanged since a time at least ``settle_s``
    before ``now``. Raises ``OSError`` when ``db`` cannot be stat'ed."""
    if has_sidecar(db):
        return False, None
    st = db.stat()
    key = (st.st_size, st.st_mtime_ns)
    if st.st_size == 0 or seen is None or seen[:2] != key:
        return False, (*key, now)
    return now - seen[2] >= settle_s, seen


@dataclass
class _FileState:
    header: bytes = b""
    fmt: str | None = None
    offset: int = 0  # bytes consumed, header included
    line: int = 2  # file line number of the next unread data line
    ignored: bool = False


class DirFollower:
    """Tail every ``*.csv`` and read every complete ``*.db`` under ``root``;
    see the module doc."""

    def __init__(
        self,
        root: Path,
        rejects: Rejects | None = None,
        *,
        max_chunk: int = 64 << 20,
        max_launches: int = 1_000_000,
        max_ranges: int = 100_000,
        settle_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.rejects = rejects if rejects is not None else Rejects()
        self.max_chunk = max_chunk
        self.max_launches = max_launches
        self.launches: dict[tuple[Path, str], LaunchIndex] = {}
        self.max_ranges = max_ranges
        self.ranges: dict[tuple[Path, str], pa.Table] = {}  # run -> iteration ranges
        self.next_index: dict[tuple[Path, str], dict[int, int]] = {}  # run -> pid -> next
        self._files: dict[Path, _FileState] = {}
        self.settle_s = settle_s
        self.clock = clock
        self._dbs: dict[Path, tuple[int, int, float] | None] = {}
        self._dbs_read: dict[Path, tuple[int, int]] = {}

    def _read_new(self, path: Path, st: _FileState) -> tuple[bytes, int] | None:
        """(complete new lines, their byte offset) or None."""
        try:
            size = path.stat().st_size
            if size < st.offset:  # rewritten: start over
                st.__init__()  # type: ignore[misc]
            if size == st.offset:
                return None
            with path.open("rb") as f:
                if not st.header:
                    first = f.readline(1 << 20)
                    if not first.endswith(b"\n"):
                        return None
                    st.header = first
                    st.offset = len(first)
                    st.fmt = detect_header(read_header(first))
                    if st.fmt is None:
                        st.ignored = True
                        self.rejects.add("unknown_format", str(path), 1, "unrecognised header")
                        return None
                f.seek(st.offset)
                data = f.read(self.max_chunk)
        except OSError as e:
            self.rejects.add("io_error", str(path), None, str(e))
            return None
        end = data.rfind(b"\n")
        if end < 0:
            return None
        data = data[: end + 1]
        at = st.offset
        st.offset += len(data)
        return data, at

    def poll(self) -> list[Emit]:
        """Emits for everything complete that appeared since the last poll."""
        # imported when used: rocpd loads the ADBC driver and pyarrow.dataset (~20 MB),
        # which a daemon without --rocprof-dir never needs
        from collectors.rocprof.replay import run_prefix

        try:
            files = sorted(p for p in self.root.rglob("*.csv") if p.is_file())
        except OSError as e:
            self.rejects.add("io_error", str(self.root), None, str(e))
            return []
        for p in files:
            self._files.setdefault(p, _FileState())
        marks = [p for p in files if is_marker_trace(p)]
        api = [p for p in files if p not in marks
               and (("hip" in p.name and "api" in p.name) or "hip_trace" in p.name)]
        out: list[Emit] = []
        for p in marks + api + [p for p in files if p not in api and p not in marks]:
            st = self._files[p]
            if st.ignored:
                continue
            got = self._read_new(p, st)
            if got is None or st.fmt is None:
                continue
            data, at = got
            base = st.line - 2
            st.line += data.count(b"\n")
            chunk = bytes_source(st.header, data)
            run = (p.parent, run_prefix(p))
            li = self.launches.setdefault(run, LaunchIndex())
            if st.fmt == "rocprofv3_api_trace" and is_marker_trace(p):
                out.extend(self._markers(p, chunk, base, at, run))
            elif st.fmt == "rocprofv3_api_trace":
                calls = launch_calls(read_api_trace(chunk, self.rejects, name=str(p),
                                                    line_base=base), self.rejects, str(p))
                li.add(calls)
                li.trim(self.max_launches)
            elif st.fmt in SPECS:
                pid = int(p.parent.name) if p.parent.name.isdigit() else None
                ranges = self.ranges.get(run)
                for i, batch in enumerate(iter_csv_kernel_spans(
                    chunk, st.fmt, self.rejects, launches=li, pid=pid,
                    name=str(p), line_base=base,
                )):
                    if ranges is not None:
                        t, _ = attribute_kernels(pa.Table.from_batches([batch]), ranges)
                        batch = conform("kernel_span", t)
                    out.append(Emit("kernel_span", batch, f"rocprof:{p}:{at}:{i}"))
        return out + self._poll_dbs()

    def _poll_dbs(self) -> list[Emit]:
        """Emits of the rocpd databases that became complete (:func:`db_complete`)."""
        from collectors.rocprof.replay import db_markers
        from collectors.rocprof.rocpd import RocpdError, iter_kernel_spans

        out: list[Emit] = []
        try:
            dbs = sorted(p for p in self.root.rglob("*.db") if p.is_file())
        except OSError as e:
            self.rejects.add("io_error", str(self.root), None, str(e))
            return out
        now = self.clock()
        for p in dbs:
            try:
                done, self._dbs[p] = db_complete(p, self._dbs.get(p), now, self.settle_s)
            except OSError as e:
                self.rejects.add("io_error", str(p), None, str(e))
                continue
            seen = self._dbs[p]
            if not done or seen is None or self._dbs_read.get(p) == seen[:2]:
                continue
            self._dbs_read[p] = (seen[0], seen[1])
            try:
                got = db_markers(p, self.rejects)
                for i, (signal, batch) in enumerate(join_batches(
                        iter_kernel_spans(p, self.rejects), None if got is None else got[0])):
                    tail = str(i) if signal == "kernel_span" else "roctx"
                    out.append(Emit(signal, batch, f"rocprof:{p}:db{seen[1]}:{tail}"))
            except RocpdError as e:
                self.rejects.add(e.reason, str(p), None, str(e))
        return out

    def _markers(self, p: Path, chunk: bytes, base: int, at: int,
                 run: tuple[Path, str]) -> list[Emit]:
        """Iteration ranges of a marker trace chunk: remembered for the run's
        kernels and emitted as ``iteration_span`` (key
        ``"rocprof:<file>:<byte offset>:roctx"``); iterations continue per pid."""
        nxt = self.next_index.setdefault(run, {})
        r = iteration_ranges(read_marker_regions(chunk, self.rejects, name=str(p),
                                                 line_base=base),
                             self.rejects, first_index=nxt, where=str(p))
        if r.num_rows == 0:
            return []
        agg = r.group_by("pid").aggregate([("iteration", "max")])  # one row per pid
        for pid, last in zip(agg["pid"].to_pylist(), agg["iteration_max"].to_pylist(),
                             strict=True):
            nxt[int(pid)] = int(last) + 1
        old = self.ranges.get(run)
        both = r if old is None else pa.concat_tables([old, r])
        self.ranges[run] = both.slice(max(0, both.num_rows - self.max_ranges))
        return [Emit("iteration_span", conform("iteration_span", r), f"rocprof:{p}:{at}:roctx")]

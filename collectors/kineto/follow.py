"""Live follow of a Kineto (PyTorch profiler) trace directory.

:class:`TraceDirFollower` watches every ``*.json`` / ``*.json.gz`` file under
``root`` (recursive; vLLM writes ``<worker>.<ts>.pt.trace.json[.gz]`` under
``VLLM_TORCH_PROFILER_DIR``). A trace is one JSON document written at the end
of a profiling session, so a file is parsed **once**, when it is complete:

1. its ``(size, st_mtime_ns)`` is unchanged since the previous poll,
2. its mtime is at least ``settle_s`` seconds old (by the injected clock), and
3. it parses as a whole.

A file that fails 1 or 2 waits (a profiler still writing, a truncated copy).
A file that passes 1 and 2 but fails 3 is rejected once: counted as
``bad_json`` in :class:`~collectors.rocprof.rejects.Rejects` and logged once
naming the file. Either way its ``(size, mtime)`` is remembered, so it is not
read again unless it changes (a rewritten file is a new trace).

Memory is bounded: entries of files that vanished are dropped each poll and
at most ``max_files`` handled files are remembered; past that the oldest (by
mtime) are forgotten and a floor mtime is kept, so a file at or below the
floor is taken as already handled.

Emit keys are ``"kineto:<path>:<size>:<mtime_ns>:<i>"``: the same file
version always gets the same keys, so a re-publish is deduplicated by
JetStream. Timestamps are moved onto the wall clock per file as for rocprof
(:mod:`collectors.rocprof.clock`: the first of realtime, boottime, monotonic
that puts the file's first span between boot and now; none fits -> kept as
recorded, which is ``baseTimeNanoseconds`` + ``ts``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc

from collectors.base import Emit
from collectors.rocprof.clock import detect, shift
from collectors.rocprof.jsonfmt import kineto_emits, load_json
from collectors.rocprof.rejects import Rejects

SUFFIXES = (".json", ".json.gz")
"""File names the follower considers (a temp name such as ``x.json.tmp`` is not one)."""


def boot_window() -> tuple[int, int]:
    """Wall-clock ns of (boot, now): the window a live trace must lie in."""
    now = time.time_ns()
    return now - time.clock_gettime_ns(time.CLOCK_BOOTTIME), now


class TraceDirFollower:
    """Parse each complete Kineto trace under ``root`` once; see the module doc.

    ``clock`` returns wall-clock seconds (compared with file mtimes);
    ``window`` gives the (boot, now) wall-clock ns used for clock detection;
    ``log`` receives one line per parsed or rejected file."""

    def __init__(
        self,
        root: Path,
        rejects: Rejects | None = None,
        *,
        settle_s: float = 2.0,
        model: str | None = None,
        clock: Callable[[], float] = time.time,
        window: Callable[[], tuple[int, int]] = boot_window,
        log: Callable[[str], None] = print,
        max_files: int = 65536,
    ) -> None:
        self.root = root
        self.rejects = rejects if rejects is not None else Rejects()
        self.settle_s = settle_s
        self.model = model
        self.clock = clock
        self.window = window
        self.log = log
        self.max_files = max_files
        self.done: dict[Path, tuple[int, int]] = {}  # handled file -> (size, mtime_ns)
        self.pending: dict[Path, tuple[int, int]] = {}  # seen, not complete -> (size, mtime_ns)
        self.floor_mtime_ns = -1  # files at or below were handled and forgotten
        self.parsed = 0  # files parsed
        self.clocks: dict[Path, str] = {}  # last few files' detected clock (for logs/tests)

    def _scan(self) -> dict[Path, tuple[int, int]]:
        out: dict[Path, tuple[int, int]] = {}
        try:
            names = sorted(p for p in self.root.rglob("*") if p.name.endswith(SUFFIXES))
        except OSError as e:
            self.rejects.add("io_error", str(self.root), None, str(e))
            return out
        for p in names:
            try:
                st = p.stat()
            except OSError:  # vanished between listing and stat (a rename): next poll
                continue
            if p.is_file():
                out[p] = (st.st_size, st.st_mtime_ns)
        return out

    def poll(self) -> list[Emit]:
        """Emits of every file that became complete since the previous poll."""
        seen = self._scan()
        now = self.clock()
        out: list[Emit] = []
        for p, sig in seen.items():
            if self.done.get(p) == sig or (p not in self.done and sig[1] <= self.floor_mtime_ns):
                continue
            self.done.pop(p, None)  # changed since handled: a new version
            prev = self.pending.get(p)
            self.pending[p] = sig
            if prev != sig or now - sig[1] / 1e9 < self.settle_s:
                continue
            del self.pending[p]
            self.done[p] = sig
            out.extend(self._parse(p, sig))
        for gone in [p for p in self.pending if p not in seen]:
            del self.pending[gone]
        for gone in [p for p in self.done if p not in seen]:
            del self.done[gone]
        if len(self.done) > self.max_files:
            oldest = sorted(self.done.items(), key=lambda kv: kv[1][1])
            for p, sig in oldest[: len(self.done) - self.max_files]:
                del self.done[p]
                self.floor_mtime_ns = max(self.floor_mtime_ns, sig[1])
        return out

    def _parse(self, p: Path, sig: tuple[int, int]) -> list[Emit]:
        try:
            doc = load_json(p)
        except ValueError as e:
            self.rejects.add("bad_json", str(p), None, str(e.__cause__ or e)[:200])
            self.log(f"kineto: rejected {e}")
            return []
        pairs = kineto_emits(doc, p, self.rejects, self.model)
        self.parsed += 1
        firsts = [pc.min(b.column("start_ns")).as_py() for _, b in pairs if b.num_rows]
        got = detect(int(min(firsts)), self.window()) if firsts else None
        name, offset = got if got is not None else ("unknown", 0)
        self.clocks[p] = name
        while len(self.clocks) > 64:
            del self.clocks[next(iter(self.clocks))]
        counts = {s: b.num_rows for s, b in pairs}
        self.log(f"kineto: {p}: {counts.get('kernel_span', 0)} kernel spans, "
                 f"{counts.get('iteration_span', 0)} iterations, clock {name}"
                 + (f" (+{offset} ns)" if offset else ""))  # fmt: skip
        return [Emit(s, shift(b, offset), f"kineto:{p}:{sig[0]}:{sig[1]}:{i}")
                for i, (s, b) in enumerate(pairs)]

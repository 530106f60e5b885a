"""``attach`` collector: GPU kernel spans from a RUNNING server by sampling
windows of ``rocprofv3 --attach PID``.

rocprofv3 writes its output when the profiled process exits or detaches, so a
long-running server yields nothing to a directory follower. Every
``every_s`` (default 60) this collector attaches to each target for
``window_s`` (default 2) with kernel, HIP runtime and marker tracing in rocpd
format (:mod:`collectors.attach.window`), reads the window's database into
``kernel_span`` batches (boot clock moved onto the wall clock), publishes them
and deletes the database.

Options (``[collectors.attach]``, ``run --attach PID --attach-every S
--attach-window S --attach-discovered``): ``pids``, ``every_s``, ``window_s``,
``rocprofv3`` (executable), ``out_dir`` (scratch for window databases),
``discovered`` (also every process workload discovery watches),
``timeout_s`` (a window running this long past its end is killed).

Requirements are checked up front, one message each, logged once per target
(:mod:`collectors.attach.requirements`): a rocprofv3 with ``--attach``; the
target started with ``ROCP_TOOL_ATTACH=1``; ptrace permission (Yama,
``CAP_SYS_PTRACE``). The duty cycle and its cost are published as
``gauge_sample`` rows per finished window: ``aaco.attach.window.duration``
(s), ``aaco.attach.window.spans`` and the counter ``aaco.attach.windows``
(attribute ``outcome``: ``ok`` or ``failed``), each with attribute ``pid``.
The analytics engine splits the target's iteration latency into inside and
outside those windows. A failed window is counted in ``drops()`` by reason
and never stops the daemon; the next one runs on schedule.
"""

from __future__ import annotations

import itertools
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from collectors.attach.requirements import env_problem, ptrace_problem, tool_problem
from collectors.attach.window import Window, WindowError
from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.rocprof.rejects import Rejects

__all__ = ["AttachCollector"]


@register("attach")
class AttachCollector:
    """See the module doc."""

    name = "attach"
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "pids": list, "every_s": float, "window_s": float, "rocprofv3": str, "out_dir": str,
        "discovered": bool, "timeout_s": float, "interval_s": float}
    """Config keys (``[collectors.attach]``) and their types; see ``sample.toml``."""

    def __init__(self, ctx: CollectorContext) -> None:
        o = ctx.options
        self.ctx = ctx
        self.pids = [int(p) for p in o.get("pids", ())]
        self.every_s = float(o.get("every_s", 60.0))
        self.window_s = float(o.get("window_s", 2.0))
        self.timeout_s = float(o.get("timeout_s", 30.0))
        self.interval_s = float(o.get("interval_s", min(0.5, self.window_s / 2)))
        self.discovered = bool(o.get("discovered", False))
        self.exe = str(o.get("rocprofv3", "rocprofv3"))
        if self.window_s <= 0 or self.every_s < self.window_s:
            raise ValueError(f"attach: window_s={self.window_s} must be > 0 and <= "
                             f"every_s={self.every_s}")
        self._tmp = tempfile.TemporaryDirectory(prefix="aaco-attach-") if not o.get(
            "out_dir") else None
        self.out_dir = Path(str(o.get("out_dir") or (self._tmp.name if self._tmp else ".")))
        self.problem = tool_problem(self.exe)
        self.source = "none" if self.problem else "rocprofv3"
        if self.problem:
            ctx.log(f"attach: {self.problem}; no windows")
        self.running: dict[int, Window] = {}
        self.next_due: dict[int, float] = {}
        self.windows: Counter[tuple[int, str]] = Counter()
        self.rejects = Rejects()
        self._drops: Counter[str] = Counter()
        self._logged: set[tuple[int, str]] = set()
        self._seq = itertools.count()
        self._run = f"attach-{ctx.host}-{uuid.uuid4().hex[:8]}"

    def targets(self) -> set[int]:
        """The pids sampled now: the configured ones, plus discovery's when asked."""
        return set(self.pids) | (set(self.ctx.pids) if self.discovered else set())

    def _log_once(self, pid: int, msg: str) -> None:
        if (pid, msg) not in self._logged:
            self._logged.add((pid, msg))
            self.ctx.log(f"attach: {msg}")

    def collect(self) -> Iterable[Emit]:
        """Harvest finished windows and start the ones that are due."""
        emits: list[Emit] = []
        for pid, w in list(self.running.items()):
            if w.done():
                del self.running[pid]
                emits += self._finish(w)
        if self.problem:
            return emits
        now, targets = time.monotonic(), self.targets()
        for pid in sorted(targets):
            if pid in self.running or self.next_due.get(pid, 0.0) > now:
                continue
            self.next_due[pid] = now + self.every_s
            problem = env_problem(pid) or ptrace_problem(pid)
            if problem:
                self._drops["not_attachable"] += 1
                self._log_once(pid, problem)
                continue
            try:
                self.running[pid] = Window.start(self.exe, pid, self.window_s,
                                                 self.out_dir / f"{pid}-{next(self._seq)}",
                                                 self.timeout_s)
            except OSError as e:
                self._drops["window_start_error"] += 1
                self._log_once(pid, f"cannot start rocprofv3: {e}")
        for pid in [p for p in self.next_due if p not in targets and p not in self.running]:
            del self.next_due[pid]
        return emits

    def _finish(self, w: Window) -> list[Emit]:
        key = f"{self._run}:{w.pid}:{w.start_ns}"
        try:
            batches = w.harvest(self.rejects)
            outcome = "ok"
        except WindowError as e:
            batches, outcome = [], "failed"
            self._drops[f"window_{e.reason}"] += 1
            self.ctx.log(f"attach: window of pid {w.pid} failed: {e}")
        self.windows[(w.pid, outcome)] += 1
        spans = sum(b.num_rows for b in batches)
        emits = [Emit("kernel_span", b, f"{key}:{i}") for i, b in enumerate(batches)]
        emits.append(Emit("gauge_sample", self._duty(w, spans), f"{key}:duty"))
        return emits

    def _duty(self, w: Window, spans: int) -> pa.Table:
        """The window's duty-cycle rows (see the module doc)."""
        pid, end = str(w.pid), w.end_ns or time.time_ns()
        rows = [("aaco.attach.window.duration", (end - w.start_ns) / 1e9, "gauge", "s",
                 [("pid", pid)]),
                ("aaco.attach.window.spans", float(spans), "gauge", "{span}", [("pid", pid)])]
        rows += [("aaco.attach.windows", float(self.windows[(w.pid, o)]), "counter", "{window}",
                  [("pid", pid), ("outcome", o)]) for o in ("ok", "failed")]
        return pa.table({
            "ts_ns": [end] * len(rows), "metric": [r[0] for r in rows],
            "value": [r[1] for r in rows], "kind": [r[2] for r in rows],
            "unit": [r[3] for r in rows], "source": ["rocprofv3"] * len(rows),
            "attributes": pa.array([r[4] for r in rows],
                                   pa.map_(pa.string(), pa.string())),
        })

    def drops(self) -> dict[str, int]:
        """Windows not run or failed, by reason (``not_attachable``,
        ``window_start_error``, ``window_tool_exit``, ``window_no_output``,
        ``window_bad_output``), plus rows the rocpd reader rejected."""
        return {**self._drops, **self.rejects.counts}

    def close(self) -> None:
        """Stop running windows and remove the scratch directory."""
        for w in self.running.values():
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(10)
        self.running.clear()
        if self._tmp is not None:
            self._tmp.cleanup()

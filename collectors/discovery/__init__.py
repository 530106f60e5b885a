"""``discovery`` collector: finds the inference processes on the node and
keeps the pipeline's watched pid set (``ctx.pids``) equal to them.

Every ``interval_s`` (default 5 s) it rescans (:mod:`collectors.discovery.scan`),
adds new processes and their children to ``ctx.pids``, removes those that
exited, and publishes the whole set as one ``process_info`` batch, which the
Prometheus sink renders as ``aaco_watched_process_info{host, pid, comm,
reason}``. Pids it did not add (``--pid``, the ORT collector's own) are never
removed by it. An unchanged set is published again only every ``refresh_s``
(default 60 s, under the sink's 300 s expiry), a changed one at once: the
always-on daemon pays per bus message.

Options (``[collectors.discovery]``, see ``sample.toml``): ``auto`` (bool,
default true), ``comm`` (regex), ``cgroup`` (directory), ``pids`` (list),
``max_watched`` (default 64), ``interval_s`` (default 5.0), ``refresh_s``
(default 60.0; 0: every scan).

``drops()``: ``unreadable`` (processes whose ``/proc`` files may not be read,
once each) and ``max_watched`` (processes left out by the cap, once each).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import ClassVar

import pyarrow as pa

from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.discovery.scan import Discovery, Selectors, Target

__all__ = ["Discovery", "DiscoveryCollector", "Selectors", "Target"]


@register("discovery")
class DiscoveryCollector:
    """See the module doc."""

    name = "discovery"
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "auto": bool, "comm": str, "cgroup": str, "pids": list, "max_watched": int,
        "interval_s": float, "refresh_s": float}
    """Config keys (``[collectors.discovery]``) and their types; see ``sample.toml``."""
    source = "proc"

    def __init__(self, ctx: CollectorContext) -> None:
        o = ctx.options
        self.ctx = ctx
        self.interval_s = float(o.get("interval_s", 5.0))
        self.refresh_s = float(o.get("refresh_s", 60.0))
        if not 0.0 <= self.refresh_s <= 240.0:
            raise ValueError(f"discovery: option refresh_s={self.refresh_s:g}; must be in "
                             "[0, 240] (the Prometheus sink forgets a set after 300 s)")
        self._published: tuple[tuple[int, str, str, int], ...] | None = None
        self._published_at = 0.0
        sel = Selectors(auto=bool(o.get("auto", True)), comm=o.get("comm") or None,
                        cgroup=o.get("cgroup") or None,
                        pids=tuple(int(p) for p in o.get("pids", ())))
        max_watched = int(o.get("max_watched", 64))
        if max_watched < 1:
            raise ValueError(f"discovery: option max_watched={max_watched}; must be >= 1")
        self.discovery = Discovery(sel, max_watched=max_watched, log=ctx.log)
        self.targets: dict[int, Target] = {}
        self._mine: set[int] = set()
        self._seq = itertools.count()
        self._run = f"discovery-{ctx.host}-{uuid.uuid4().hex[:12]}"

    def collect(self) -> Iterable[Emit]:
        """Rescan, update ``ctx.pids``, and emit the snapshot (possibly empty)
        when it changed or ``refresh_s`` has passed since it was last emitted."""
        found = self.discovery.scan()
        new = set(found)
        gone = self._mine - new - set(self.discovery.selectors.pids)
        self.ctx.pids -= gone
        self.ctx.pids |= new
        added = new - self._mine
        self._mine = new
        for pid in sorted(added):
            t = found[pid]
            self.ctx.log(f"discovery: watching pid {pid} ({t.comm}, {t.reason})")
        self.targets = found
        rows = sorted(found.values(), key=lambda t: t.pid)
        snapshot = tuple((t.pid, t.comm, t.reason, t.create_ns) for t in rows)
        now = time.monotonic()
        if snapshot == self._published and now - self._published_at < self.refresh_s:
            return []  # unchanged since the last publish, which is recent enough
        self._published, self._published_at = snapshot, now
        table = pa.table({
            "ts_ns": [time.time_ns()] * len(rows),
            "pid": [t.pid for t in rows],
            "comm": [t.comm for t in rows],
            "reason": [t.reason for t in rows],
            "create_ns": [t.create_ns for t in rows],
        })
        return [Emit("process_info", table, f"{self._run}:{next(self._seq)}")]

    def drops(self) -> dict[str, int]:
        """Processes not watched, by reason (see the module doc)."""
        return dict(self.discovery.drops)

    def close(self) -> None:
        """Nothing to release."""

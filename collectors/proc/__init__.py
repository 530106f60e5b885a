"""``proc`` collector: scheduler counters of the watched processes from /proc.

See ``README.md`` in this folder for the fields and a sample config.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Mapping
from typing import ClassVar

from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.proc.sampler import ProcSampler


@register("proc")
class ProcCollector:
    """Publishes one ``sched_sample`` batch per interval (deltas per thread)."""

    name = "proc"
    follows_pids = True
    """Called at once when the watched pid set grows (see
    :attr:`exporter.pipeline.Pipeline.watched`), so a new process's threads
    are counted from then on, not from the next interval."""
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "interval_s": float, "proc_root": str}
    """Config keys (``[collectors.proc]``) and their types; see ``sample.toml``."""
    source = "proc"

    def __init__(self, ctx: CollectorContext) -> None:
        self.ctx = ctx
        self.interval_s = float(ctx.options.get("interval_s", 1.0))
        self._sampler = ProcSampler(str(ctx.options.get("proc_root", "/proc")))
        self._seq = itertools.count()
        self._run = f"proc-{ctx.host}-{uuid.uuid4().hex[:12]}"

    def collect(self) -> Iterable[Emit]:
        table = self._sampler.sample(set(self.ctx.pids))
        if table.num_rows == 0:
            return []
        return [Emit("sched_sample", table, f"{self._run}:{next(self._seq)}")]

    def close(self) -> None:
        return None

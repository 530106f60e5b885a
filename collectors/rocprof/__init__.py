"""``rocprof`` collector: kernel spans from rocprofv3 / rocprof / rocprof-compute
/ Kineto outputs, live (directory follow) or replayed.

Options: ``dir`` (directory rocprofv3 writes into, required),
``interval_s`` (poll period, default 1.0) and ``settle_s`` (seconds a rocpd
``.db`` must keep its size and mtime, with no ``-journal``/``-wal`` beside it,
before it is read; default 2.0). See ``README.md`` in this folder.

Public API for the daemon / CLI:

* :func:`collectors.rocprof.replay.load_paths` - replay recorded files
* :func:`collectors.rocprof.runner.rocprofv3_command`,
  :func:`collectors.rocprof.runner.find_outputs` - ``capture -- CMD``
* :class:`collectors.rocprof.follow.DirFollower` - what this collector wraps
* :class:`collectors.rocprof.clock.ClockMapper` - tracer clock -> wall clock
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar

from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.rocprof.clock import ClockMapper
from collectors.rocprof.follow import DirFollower
from collectors.rocprof.rejects import Rejects


@register("rocprof")
class RocprofCollector:
    """Follows ``options["dir"]``; emits ``kernel_span`` batches (and
    ``iteration_span`` batches of roctx marker ranges, :mod:`.markers`).

    Raises ``ValueError`` at construction when ``dir`` is missing; never
    raises from :meth:`collect` (bad rows go to :meth:`drops`)."""

    name = "rocprof"
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "dir": str, "interval_s": float, "settle_s": float}
    """Config keys (``[collectors.rocprof]``) and their types; see ``sample.toml``."""
    source = "rocprofv3"

    def __init__(self, ctx: CollectorContext) -> None:
        if "dir" not in ctx.options:
            raise ValueError("rocprof collector: option 'dir' (rocprofv3 output dir) is required")
        self.ctx = ctx
        self.interval_s = float(ctx.options.get("interval_s", 1.0))
        self.rejects = Rejects()
        self.follower = DirFollower(Path(str(ctx.options["dir"])), self.rejects,
                                    settle_s=float(ctx.options.get("settle_s", 2.0)))
        self.clock = ClockMapper()

    def collect(self) -> Iterable[Emit]:
        """New kernel (and roctx iteration) spans, timestamps moved onto the wall clock (see
        :mod:`collectors.rocprof.clock`; the window is boot time to now)."""
        out = []
        for e in self.follower.poll():
            if e.signal in ("kernel_span", "iteration_span"):  # roctx ranges: same clock
                now = time.time_ns()
                boot = now - time.clock_gettime_ns(time.CLOCK_BOOTTIME)
                known = self.clock.clock
                e = Emit(e.signal, self.clock(e.batch, (boot, now)), e.key)
                if known is None and self.clock.clock is not None:
                    self.ctx.log(f"rocprof: timestamps on the {self.clock.clock} clock"
                                 + (f", +{self.clock.offset_ns} ns to wall clock"
                                    if self.clock.offset_ns else ""))  # fmt: skip
            out.append(e)
        return out

    def drops(self) -> dict[str, int]:
        """Dropped rows so far, per reason token."""
        return dict(self.rejects.counts)

    def close(self) -> None:
        return None

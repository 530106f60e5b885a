"""Wall-clock time per phase of a bounded session (``replay``, ``capture``).

>>> p = Phases()
>>> with p.time("parse"):
...     pass
>>> sorted(p.seconds)
['parse']
>>> p.summary().startswith("timings: parse ")
True

Phases: ``start`` (starting the bus: the embedded nats-server, the bundle
sink's and the analytics consumer's subscriptions; for ``capture --model``
also loading the model into an ONNX Runtime session and starting the
collectors), ``run`` (the model's iterations or the profiled command, the
collectors publishing meanwhile), ``parse`` (reading the inputs;
``replay`` parses in a worker thread ahead of the bus, so there it is the
time spent waiting for the parser),
``bus`` (publishing on the bus; in ``capture --model`` only what the outbox
held at the end, the spans being published during ``run``), ``analytics``
(the analytics consumer's fetches that brought messages, and its drain),
``bundle`` (Parquet and JSON files of the bundle, the bundle sink's reading
of the bus included), ``trace``
(``trace.pftrace``). A phase timed several times adds up. Times are
``time.perf_counter`` seconds. The phases of one session do not overlap,
except ``analytics``, ``bundle`` and ``trace``: the two readers of the bus
read side by side, the trace is written while the analytics consumer
settles (:class:`exporter.session.Session`), and in ``capture --model`` the
consumer folds while the model runs; each is timed on its own, so their sum
may exceed the wall time they took. ``total`` is the time since the command
began, interpreter start-up excepted, so it also holds time no phase claims
(argument checks, waiting between samples).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

ORDER = ("start", "run", "parse", "bus", "analytics", "bundle", "trace")
"""Print order of the known phases (others follow in first-timed order)."""


class Phases:
    """Accumulated seconds per phase name, plus the time since creation."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.t0 = time.perf_counter()
        self._lock = threading.Lock()

    @contextmanager
    def time(self, phase: str) -> Iterator[None]:
        """Add the time spent in the ``with`` block to ``phase``."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - t)

    def add(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` to ``phase`` (a span timed elsewhere); thread-safe."""
        with self._lock:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def total(self) -> float:
        """Seconds since this object was made."""
        return time.perf_counter() - self.t0

    def as_dict(self) -> dict[str, float]:
        """Seconds per phase (rounded to ms) in print order, plus ``total``."""
        keys = [k for k in ORDER if k in self.seconds]
        keys += [k for k in self.seconds if k not in ORDER]
        out = {k: round(self.seconds[k], 3) for k in keys}
        out["total"] = round(self.total(), 3)
        return out

    def summary(self) -> str:
        """``timings: parse 1.20 s, bus 0.80 s, ..., total 3.10 s``."""
        return "timings: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.as_dict().items())

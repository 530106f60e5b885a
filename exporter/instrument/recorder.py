"""Hot-path state of an instrumented process: a bounded queue of per-call tuples.

Standard library only, so importing it never drags Arrow or NATS into the
instrumented program's import time. The wrapper (:mod:`.patch`) appends one
:data:`Row` per ``InferenceSession.run`` call; the publisher thread
(:mod:`.publisher`) drains the queue. When the queue holds ``cap`` rows a
call is not queued and counted as a ``queue_full`` drop; rows are never
evicted.

Drop reasons (bounded): ``queue_full``, ``publish_failed`` (the bus refused
or was unreachable for the whole retry budget, or the pending backlog was
full), ``shutdown`` (still unpublished when the exit flush timed out),
``error`` (an exception of ours, swallowed); for finished generate calls
(:mod:`.llm`, counted in calls) ``llm_queue_full``, ``llm_publish_failed``
and ``llm_shutdown``.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

DEFAULT_QUEUE_CAP = 65_536
"""Rows the queue holds before calls are dropped (``AACO_INSTRUMENT_QUEUE``)."""

DROP_REASONS = ("queue_full", "publish_failed", "shutdown", "error", "llm_queue_full",
                "llm_publish_failed", "llm_shutdown")


@dataclass(eq=False)
class SessionMeta:
    """What every row of one session shares; computed once per session.

    ``counter`` is shared by all sessions of the same model in this process,
    so iteration indices are per ``(pid, model)`` and start at 0.
    """

    model: str
    model_path: str | None
    provider: str | None
    counter: Iterator[int]


Row = tuple[int, int, int, SessionMeta, int, "int | None", "int | None", "int | None"]
"""``(start_ns, end_ns, tid, meta, iteration, batch_size, trace_id, span_id)``:
wall-clock ``time.time_ns()`` bounds of the call, native thread id, the
session's :class:`SessionMeta`, the iteration index, the first dim of the
first input (or None), and the caller's OpenTelemetry trace id (128-bit int)
and span id (64-bit int) or None."""


def process_start_ns() -> int:
    """This process's start time, ns since the epoch (``/proc``; else now).

    Part of every message id, so a recycled pid never collides with an
    earlier process inside JetStream's duplicate window.
    """
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(ln.split()[1]) for ln in f if ln.startswith("btime "))
        return btime * 1_000_000_000 + ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time_ns()


@dataclass(eq=False)
class Recorder:
    """The queue, the per-model iteration counters and the drop counters.

    ``queue`` is appended by any thread and popped only by the publisher;
    ``deque.append``/``popleft`` are atomic under the GIL. Drops and models
    are updated under ``lock`` (the rare paths only).
    """

    cap: int = DEFAULT_QUEUE_CAP
    pid: int = field(default_factory=os.getpid)
    start_ns: int = field(default_factory=process_start_ns)
    queue: deque[Row] = field(default_factory=deque)
    drops: Counter[str] = field(default_factory=Counter)
    models: dict[str, SessionMeta] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    drained: int = 0  # rows taken off the queue (publisher thread only)
    published: int = 0  # rows acknowledged by JetStream (publisher thread only)
    generates_published: int = 0  # generate calls acknowledged (publisher thread only)
    seq: Iterator[int] = field(default_factory=itertools.count)  # message ids, process-wide
    _counters: dict[str, Iterator[int]] = field(default_factory=dict)
    _metas: weakref.WeakSet[SessionMeta] = field(default_factory=weakref.WeakSet)

    def drop(self, reason: str, n: int = 1) -> None:
        """Count ``n`` dropped rows (or swallowed errors) under ``reason``."""
        with self.lock:
            self.drops[reason] += n

    def meta(self, model: str, model_path: str | None, provider: str | None) -> SessionMeta:
        """A :class:`SessionMeta` sharing ``model``'s iteration counter."""
        with self.lock:
            counter = self._counters.setdefault(model, itertools.count())
            m = SessionMeta(model, model_path, provider, counter)
            self.models.setdefault(model, m)
            self._metas.add(m)
            return m

    def reset_after_fork(self) -> None:
        """In a forked child: new pid and start time, empty queue and counters,
        iteration indices from 0 again (also for sessions made before the fork)."""
        self.lock = threading.Lock()  # another thread may have held it at fork time
        self.pid = os.getpid()
        self.start_ns = process_start_ns()
        self.queue.clear()
        self.drops.clear()
        self.drained = self.published = self.generates_published = 0
        self.seq = itertools.count()
        self._counters = {}
        for m in list(self._metas):
            m.counter = self._counters.setdefault(m.model, itertools.count())


def queue_cap_from_env() -> int:
    """``AACO_INSTRUMENT_QUEUE`` as a positive int, else :data:`DEFAULT_QUEUE_CAP`."""
    try:
        return max(1, int(os.environ.get("AACO_INSTRUMENT_QUEUE", DEFAULT_QUEUE_CAP)))
    except ValueError:
        return DEFAULT_QUEUE_CAP

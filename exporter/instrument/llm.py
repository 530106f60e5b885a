"""Mark generate calls and their token steps: TTFT, inter-token latency, tokens/s.

Standard library only (like :mod:`.recorder`), so the hot path stays cheap::

    from exporter.instrument.llm import generate_span

    with generate_span("romanizer", batch_size=len(prompts), step_session=decoder):
        model.generate(prompts)      # every decoder.run is one token step
    # or wrap a step function with g.marks(fn), or call g.token() after each step

A span starts when the ``with`` block is entered (the request arrives) and
ends when it exits. Each :meth:`GenerateSpan.token` call is one decode step
that emitted ``n`` tokens (default ``batch_size``: one per sequence of the
batch), stamped with ``time.time_ns()`` (wall clock, ns since the epoch,
the clock of the instrumented ``iteration_span`` rows). The first step's
time minus the start is the time to first token (prefill/encode plus the
first decode step); gaps between consecutive steps are inter-token
latencies. Definitions and the derived tables: :mod:`stream_analytics.llm`,
docs/llm.md.

Finished spans are kept in a bounded in-process store (:data:`MAX_RECORDS`
spans; older ones are evicted and counted in :func:`dropped`) read with
:func:`records`; a span whose block raised is kept with ``error`` set.

Under ``aaco-exporter instrument`` (the instrumentation hook) finished spans
are also queued for the bus (:func:`enable_pending`, at most
:data:`MAX_PENDING`; overflow evicts the oldest, counted by
:func:`pending_evicted`): the instrumentation publisher takes them
(:func:`take_pending`) every tick and publishes them as ``generate_span``
batches (:mod:`exporter.instrument.publisher`).

Under ``aaco-exporter capture -- CMD`` the environment variable
:data:`ENV_DIR` (``AACO_LLM_DIR``) names a directory: at exit the process
writes its spans there as ``<pid>.jsonl`` (:func:`save`), and the capture
turns them into the bundle's ``llm/`` files (:func:`load`,
:func:`exporter.llm_bundle.write_llm`).
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

ENV_DIR = "AACO_LLM_DIR"
"""Environment variable: directory the spans are saved into at exit."""

MAX_RECORDS = 16_384
"""Finished generate spans kept in the process before the oldest is evicted."""

_lock = threading.Lock()
_store: deque[GenerateRecord] = deque(maxlen=MAX_RECORDS)
_ids = itertools.count()
_evicted = 0
_exit_hook = False

MAX_PENDING = 16_384
"""Finished spans waiting for the instrumentation publisher (when it runs)."""

_pending: deque[GenerateRecord] | None = None
_pending_evicted = 0


@dataclass
class GenerateRecord:
    """One generate call: ``start_ns``/``end_ns`` (ns since the epoch), token
    steps ``step_ns`` (ns since the epoch, one per step) with ``step_tokens``
    tokens each, ``batch_size`` sequences, the ``model`` label, ``pid``/``tid``."""

    generate_id: int
    model: str
    batch_size: int
    pid: int
    tid: int
    start_ns: int
    end_ns: int = 0
    step_ns: list[int] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    error: str | None = None


class GenerateSpan:
    """The handle :func:`generate_span` yields; mark token steps on it."""

    def __init__(self, rec: GenerateRecord, clock: Callable[[], int]) -> None:
        self.record = rec
        self._clock = clock

    def token(self, n: int | None = None) -> None:
        """One decode step emitted ``n`` tokens (default: ``batch_size``)."""
        self.record.step_ns.append(self._clock())
        self.record.step_tokens.append(self.record.batch_size if n is None else int(n))

    def marks(self, fn: Callable[P, R]) -> Callable[P, R]:
        """``fn`` wrapped so that each call that returns marks one token step."""
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
            out = fn(*args, **kwargs)
            self.token()
            return out
        return wrapped


@contextmanager
def generate_span(model: str, batch_size: int = 1, *, step_session: Any = None,
                  clock: Callable[[], int] = time.time_ns) -> Iterator[GenerateSpan]:
    """Mark one generate call of ``batch_size`` sequences (see the module doc).

    ``step_session``: an ``onnxruntime.InferenceSession`` (the decoder) whose
    every ``run`` returning inside the block is one token step; its ``run``
    is wrapped on the instance for the block only (the class, and with it
    ``aaco-exporter instrument``'s patch, is untouched and still records
    each call as an ``iteration_span``). Raises ``ValueError`` for
    ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise ValueError(f"generate_span: batch_size must be >= 1, got {batch_size}")
    _register_exit_save()
    rec = GenerateRecord(next(_ids), model, int(batch_size), os.getpid(),
                         threading.get_native_id(), clock())
    span = GenerateSpan(rec, clock)
    own = vars(step_session) if step_session is not None else {}
    had, prev = "run" in own, own.get("run")
    if step_session is not None:
        step_session.run = span.marks(step_session.run)
    try:
        yield span
    except BaseException as e:
        rec.error = type(e).__name__
        raise
    finally:
        rec.end_ns = clock()
        if step_session is not None:
            if had:
                step_session.run = prev  # an earlier instance wrapper again
            else:
                del step_session.run  # the class's run again
        _keep(rec)


def _keep(rec: GenerateRecord) -> None:
    global _evicted, _pending_evicted
    with _lock:
        if len(_store) == _store.maxlen:
            _evicted += 1
        _store.append(rec)
        if _pending is not None:
            if len(_pending) == _pending.maxlen:
                _pending_evicted += 1
            _pending.append(rec)


def enable_pending(cap: int = MAX_PENDING) -> None:
    """Queue spans finished from now on for the bus (idempotent; the
    instrumentation publisher calls it when it starts)."""
    global _pending
    with _lock:
        if _pending is None:
            _pending = deque(maxlen=max(1, cap))


def reset_pending() -> None:
    """In a forked child: forget the parent's queued spans and eviction count."""
    global _pending_evicted
    with _lock:
        if _pending is not None:
            _pending.clear()
        _pending_evicted = 0


def take_pending(limit: int) -> list[GenerateRecord]:
    """Up to ``limit`` queued spans, oldest first, removed from the queue
    ([] when queueing is not enabled)."""
    with _lock:
        if not _pending:
            return []
        return [_pending.popleft() for _ in range(min(limit, len(_pending)))]


def pending_evicted() -> int:
    """Queued spans evicted unpublished because the queue was full (cumulative)."""
    return _pending_evicted


def _register_exit_save() -> None:
    global _exit_hook
    if not _exit_hook and os.environ.get(ENV_DIR):
        _exit_hook = True
        atexit.register(_save_at_exit)


def _save_at_exit() -> None:
    d = os.environ.get(ENV_DIR)
    if d:
        try:
            save(os.path.join(d, f"{os.getpid()}.jsonl"), records())
        except OSError as e:  # never fail the program's exit
            import sys
            sys.stderr.write(f"aaco-exporter: generate spans not saved to {d}: {e}\n")


def save(path: str, recs: Iterable[GenerateRecord]) -> None:
    """Write ``recs`` to ``path``, one JSON object per line (its directory is made)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(dataclasses.asdict(r)) + "\n")


def load(paths: Iterable[str]) -> list[GenerateRecord]:
    """Spans saved by :func:`save`. Raises ``ValueError`` naming the file and
    line of a line that is not a saved span."""
    out: list[GenerateRecord] = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                try:
                    out.append(GenerateRecord(**json.loads(line)))
                except (ValueError, TypeError) as e:
                    raise ValueError(f"{p}:{i}: not a generate span ({e})") from None
    return out


def records(clear: bool = False) -> list[GenerateRecord]:
    """Finished spans, oldest first; ``clear`` empties the store."""
    with _lock:
        out = list(_store)
        if clear:
            _store.clear()
        return out


def dropped() -> int:
    """Spans evicted from the full store so far."""
    return _evicted


__all__ = [
    "ENV_DIR",
    "MAX_PENDING",
    "MAX_RECORDS",
    "GenerateRecord",
    "GenerateSpan",
    "dropped",
    "enable_pending",
    "generate_span",
    "load",
    "pending_evicted",
    "records",
    "reset_pending",
    "save",
    "take_pending",
]

"""Zero-code ONNX Runtime instrumentation, the OpenTelemetry way.

:func:`instrument_onnxruntime` wraps ``onnxruntime.InferenceSession.run`` and
``run_with_iobinding`` (the class, so every session, also ones made earlier).
Each call becomes one ``iteration_span`` row (``source="instrument"``,
``kernel_count`` 0): wall-clock ``start_ns``/``end_ns`` (``time.time_ns()``),
``pid``, ``tid`` (native thread id), ``model`` (``AACO_MODEL_NAME`` or the
model file's stem), ``model_path``, ``provider`` (the session's first
execution provider), ``batch_size`` (first dim of the first input, null for
``run_with_iobinding``), ``iteration`` (per ``(pid, model)``, from 0) and,
when the caller is inside a valid OpenTelemetry span, its ``trace_id`` (32
hex) and ``parent_span_id`` (16 hex). The hot path only appends a tuple to a
bounded queue; a daemon thread (:mod:`.publisher`) publishes batches to
JetStream every 0.25 s, plus one ``graph_info`` per model and the drop
counters (``gauge_sample`` ``aaco.instrument.dropped``).

Environment: ``AACO_NATS_URL`` (default
:data:`exporter.natsserver.DEFAULT_URL`), ``AACO_HOST`` (default
``socket.gethostname()``), ``AACO_MODEL_NAME``, ``AACO_INSTRUMENT_QUEUE``
(queue cap, rows; default 65536). The server never waits for the bus: with
it down, calls run at full speed and rows are counted as drops by reason
(:data:`.recorder.DROP_REASONS`). At interpreter exit what is queued is
flushed for at most :data:`EXIT_FLUSH_S`; if anything was dropped, one line
on stderr says how much and why.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exporter.instrument.patch import patch_class, unpatch_class
from exporter.instrument.recorder import Recorder, queue_cap_from_env

if TYPE_CHECKING:
    from exporter.instrument.publisher import Publisher

EXIT_FLUSH_S = 2.0
"""Seconds the exit flush may take before what is left counts as ``shutdown`` drops."""

_lock = threading.RLock()
_rec: Recorder | None = None
_pub: Publisher | None = None
_hooks_registered = False


@dataclass(frozen=True)
class InstrumentStats:
    """Counters of this process's instrumentation (rows are inference calls).

    ``recorded``: rows queued so far; ``published``: rows acknowledged by
    JetStream; ``queued``: rows waiting in the queue; ``dropped``: rows (or,
    for ``error``, swallowed exceptions; for ``llm_*``, generate calls) by
    reason; ``generates_published``: finished generate calls
    (:mod:`exporter.instrument.llm`) acknowledged as ``generate_span`` rows.
    """

    instrumented: bool
    recorded: int = 0
    published: int = 0
    queued: int = 0
    connected: bool = False
    dropped: dict[str, int] = field(default_factory=dict)
    generates_published: int = 0

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


def _recorder() -> Recorder:
    global _rec
    if _rec is None:
        _rec = Recorder(cap=queue_cap_from_env())
    return _rec


def _start_publisher(rec: Recorder) -> None:
    global _pub
    from exporter.instrument.publisher import Publisher
    from exporter.natsserver import DEFAULT_URL

    _pub = Publisher(rec, os.environ.get("AACO_NATS_URL") or DEFAULT_URL,
                     os.environ.get("AACO_HOST") or None)
    _pub.start()


def _after_fork_in_child() -> None:
    global _pub
    if _rec is None:
        return
    _rec.reset_after_fork()
    from exporter.instrument import llm

    llm.reset_pending()
    running, _pub = _pub is not None, None
    if running:
        _start_publisher(_rec)


def _at_exit() -> None:
    s = shutdown(EXIT_FLUSH_S)
    if s.dropped_total:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(s.dropped.items()))
        llm = (f", {s.generates_published} generate calls published"
               if s.generates_published or any(k.startswith("llm_") for k in s.dropped) else "")
        with contextlib.suppress(Exception):
            sys.stderr.write(f"aaco-exporter instrument: pid {os.getpid()}: "
                             f"{s.published} iteration spans published{llm}, "
                             f"dropped: {reasons}\n")


def instrument_onnxruntime() -> bool:
    """Wrap ``InferenceSession.run``/``run_with_iobinding`` and start publishing.

    Idempotent: returns False (and changes nothing) when already instrumented.
    """
    global _hooks_registered
    import onnxruntime

    with _lock:
        rec = _recorder()
        if not patch_class(onnxruntime.InferenceSession, rec):
            return False
        if _pub is None:
            _start_publisher(rec)
        if not _hooks_registered:
            atexit.register(_at_exit)
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _hooks_registered = True
        return True


def uninstrument_onnxruntime(timeout_s: float = EXIT_FLUSH_S) -> bool:
    """Restore the original methods and flush (at most ``timeout_s``).

    Returns False when onnxruntime was not instrumented.
    """
    ort = sys.modules.get("onnxruntime")
    with _lock:
        done = ort is not None and unpatch_class(ort.InferenceSession)
        shutdown(timeout_s)
        return done


def shutdown(timeout_s: float = EXIT_FLUSH_S) -> InstrumentStats:
    """Stop the publisher after a final flush of at most ``timeout_s``; rows
    still unpublished then count as ``shutdown`` drops. Returns :func:`stats`."""
    global _pub
    with _lock:
        pub, _pub = _pub, None
    if pub is not None:
        pub.stop(timeout_s)
    return stats()


def stats() -> InstrumentStats:
    """This process's counters (see :class:`InstrumentStats`)."""
    rec = _rec
    if rec is None:
        return InstrumentStats(instrumented=False)
    ort = sys.modules.get("onnxruntime")
    run = getattr(getattr(ort, "InferenceSession", None), "run", None)
    with rec.lock:
        dropped = dict(rec.drops)
    queued = len(rec.queue)
    pub = _pub
    return InstrumentStats(
        instrumented=hasattr(run, "__aaco_wrapped__"),
        recorded=rec.drained + queued,
        published=rec.published,
        queued=queued,
        connected=pub is not None and pub.connected,
        dropped=dropped,
        generates_published=rec.generates_published,
    )


__all__ = ["EXIT_FLUSH_S", "InstrumentStats", "instrument_onnxruntime", "shutdown", "stats",
           "uninstrument_onnxruntime"]

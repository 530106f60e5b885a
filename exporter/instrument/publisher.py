"""The instrumented process's publisher: a daemon thread with its own asyncio loop.

Every ``interval_s`` (0.25 s) it drains the recorder's queue into
``iteration_span`` batches of at most ``batch_rows`` rows (built columnar,
encoded with :func:`exporter.schema.encode`, ``source="instrument"``,
``kernel_count`` 0) and publishes them to JetStream with message ids
``instr:<host>:<pid>:<process-start-ns>:<seq>``. It also publishes one
``graph_info`` per model (``collectors/ort/graph.py`` on the model path;
id ``instr:<host>:<pid>:<start>:graph:<model>``) and, whenever they change,
the drop counters as ``gauge_sample`` rows (metric ``aaco.instrument.dropped``,
kind ``counter``, unit ``1``, attributes ``reason`` and ``pid``).

Finished generate calls (:func:`exporter.instrument.llm.generate_span`) are
taken from that module's queue on the same tick and published as
``generate_span`` batches of at most ``LLM_BATCH_ROWS`` calls (one row per
call, token steps in list columns; never a message per token) with ids
``instr:<host>:<pid>:<start>:llm:<seq>``, through the same backlog and
retries. Their drops carry the reasons ``llm_queue_full``,
``llm_publish_failed`` and ``llm_shutdown`` (counted in generate calls).

Encoded batches wait in a backlog of at most ``max(cap, BACKLOG_ROWS)`` rows; a batch is
retried every tick for ``retry_ticks`` ticks (about 10 s), then dropped as
``publish_failed``. Connecting is one attempt per try, with exponential
backoff (0.25 s doubling to 8 s); nothing here ever blocks the caller of
``InferenceSession.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

import nats
import onnx  # noqa: F401  (load_graph imports it when first called: see below)
import pyarrow as pa
from nats.aio.client import Client
from nats.js import JetStreamContext

# Imported here, in the thread that imports onnxruntime, never lazily in the
# publisher thread: a submodule import there while the program's main thread
# imports the parent package deadlocks the two (Python raises _DeadlockError
# in one of them, possibly the program's). onnx, which load_graph imports when
# first called, is imported above for the same reason.
from collectors.ort.graph import ModelError, load_graph
from exporter import schema
from exporter.instrument import llm as llm_spans
from exporter.instrument.recorder import Recorder, Row, SessionMeta
from exporter.nats_urls import server_list

INTERVAL_S = 0.25
BATCH_ROWS = 8192
LLM_BATCH_ROWS = 1024  # generate calls per generate_span message
LLM = "llm_"  # drop reason prefix of generate calls
BACKLOG_ROWS = 65_536  # encoded rows awaiting the bus (about 25 bytes each), at least the queue cap
RETRY_TICKS = 40
BACKOFF_MAX_S = 8.0
PUBLISH_TIMEOUT_S = 2.0
DROP_METRIC = "aaco.instrument.dropped"
SOURCE = "instrument"

log = logging.getLogger("aaco.instrument")


@dataclass
class _Pending:
    msg: schema.Message
    rows: int
    attempts: int = 0
    kind: str = ""  # "" iteration spans, LLM generate calls (drop reason prefix)


def iteration_batch(rows: list[Row], pid: int) -> pa.RecordBatch:
    """``ITERATION_SPAN`` batch of queued rows (one column at a time)."""
    start, end, tid, metas, it, batch, trace, span = (list(c) for c in zip(*rows, strict=True))
    return schema.conform("iteration_span", pa.table({
        "start_ns": pa.array(start, pa.int64()),
        "end_ns": pa.array(end, pa.int64()),
        "duration_ns": pa.array([e - s for s, e in zip(start, end, strict=True)], pa.int64()),
        "source": pa.array([SOURCE] * len(rows)),
        "model": pa.array([m.model for m in metas]),
        "pid": pa.array([pid] * len(rows), pa.int64()),
        "iteration": pa.array(it, pa.int64()),
        "kernel_count": pa.array([0] * len(rows), pa.int64()),
        "tid": pa.array(tid, pa.int64()),
        "model_path": pa.array([m.model_path for m in metas], pa.string()),
        "provider": pa.array([m.provider for m in metas], pa.string()),
        "batch_size": pa.array(batch, pa.int64()),
        "trace_id": pa.array([None if t is None else f"{t:032x}" for t in trace], pa.string()),
        "parent_span_id": pa.array([None if s is None else f"{s:016x}" for s in span],
                                   pa.string()),
    }))


def generate_batch(recs: list[llm_spans.GenerateRecord]) -> pa.RecordBatch:
    """``GENERATE_SPAN`` batch: one row per finished generate call."""
    return schema.conform("generate_span", pa.table({
        "generate_id": pa.array([r.generate_id for r in recs], pa.int64()),
        "model": pa.array([r.model for r in recs], pa.string()),
        "pid": pa.array([r.pid for r in recs], pa.int64()),
        "tid": pa.array([r.tid for r in recs], pa.int64()),
        "batch_size": pa.array([r.batch_size for r in recs], pa.int64()),
        "start_ns": pa.array([r.start_ns for r in recs], pa.int64()),
        "end_ns": pa.array([r.end_ns for r in recs], pa.int64()),
        "step_ns": pa.array([r.step_ns for r in recs], pa.list_(pa.int64())),
        "step_tokens": pa.array([r.step_tokens for r in recs], pa.list_(pa.int64())),
        "error": pa.array([r.error for r in recs], pa.string()),
    }))


def drops_batch(drops: dict[str, int], pid: int, ts_ns: int) -> pa.RecordBatch:
    """``GAUGE_SAMPLE`` rows: cumulative drops per reason."""
    reasons = sorted(drops)
    return schema.conform("gauge_sample", pa.table({
        "ts_ns": pa.array([ts_ns] * len(reasons), pa.int64()),
        "metric": [DROP_METRIC] * len(reasons),
        "value": pa.array([float(drops[r]) for r in reasons], pa.float64()),
        "kind": ["counter"] * len(reasons),
        "unit": ["1"] * len(reasons),
        "source": [SOURCE] * len(reasons),
        "attributes": pa.array([[("reason", r), ("pid", str(pid))] for r in reasons],
                               pa.map_(pa.string(), pa.string())),
    }))


class Publisher:
    """Drains ``rec`` to the bus at ``url`` as ``host`` from a daemon thread."""

    def __init__(self, rec: Recorder, url: str, host: str | None = None) -> None:
        self.rec = rec
        self.url = url
        self.host = host or socket.gethostname()
        self.prefix = f"instr:{schema.sanitize_token(self.host)}:{rec.pid}:{rec.start_ns}"
        self.backlog: deque[_Pending] = deque()
        self.backlog_rows = 0
        self.graphs_done: set[str] = set()
        self.graph_tries: dict[str, int] = {}
        self.drops_sent: dict[str, int] = {}
        self.connect_failures = 0
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self._backoff = INTERVAL_S
        self._next_connect = 0.0
        self.llm_evicted = 0
        self._stop = threading.Event()
        self.abandoned = False
        self._deadline = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._main, name="aaco-instrument", daemon=True)

    # -- thread control (any thread) ----------------------------------------------
    def start(self) -> None:
        """Warm the encode path in the calling thread, then start publishing.

        pyarrow imports pandas lazily on first use; doing that here, in the
        thread that imported onnxruntime, keeps the publisher thread from
        importing packages the program's main thread may be importing at the
        same moment. (Our own modules are imported at the top of this module
        for the same reason: a submodule imported in the publisher thread
        while the main thread imports its parent package deadlocks the two,
        and Python raises ``_DeadlockError`` in one of them, possibly the
        program's.)
        """
        with contextlib.suppress(Exception):
            meta = SessionMeta("warm", "warm.onnx", "CPUExecutionProvider", iter(()))
            row: Row = (0, 1, 0, meta, 0, 1, 1, 1)  # one row: empty batches import nothing
            schema.encode("iteration_span", iteration_batch([row], self.rec.pid),
                          host=self.host, msg_id="warm")
            schema.encode("gauge_sample", drops_batch({"warm": 0}, self.rec.pid, 0),
                          host=self.host, msg_id="warm")
            schema.encode("generate_span", generate_batch(
                [llm_spans.GenerateRecord(0, "warm", 1, 0, 0, 0, 1, [1], [1])]),
                host=self.host, msg_id="warm")
        llm_spans.enable_pending()
        self.llm_evicted = llm_spans.pending_evicted()
        self.thread.start()

    def stop(self, timeout_s: float) -> bool:
        """Final flush: drain, publish, count what is left as ``shutdown``.
        Returns False when the thread did not finish within ``timeout_s``."""
        self._deadline = time.monotonic() + timeout_s
        self._stop.set()
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(wake.set)
        if self.thread.is_alive():
            self.thread.join(timeout_s)
        if self.thread.is_alive():  # count what is left here; the thread will not
            self.abandoned = True
            for reason, n in self._left(len(self.rec.queue)).items():
                self.rec.drop(reason, n)
            return False
        return True

    @property
    def connected(self) -> bool:
        return self.nc is not None and self.nc.is_connected

    # -- the loop -------------------------------------------------------------------
    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._run())
        except Exception:
            log.debug("publisher loop failed", exc_info=True)
            self.rec.drop("error")
        finally:
            self._loop = None
            loop.close()

    async def _run(self) -> None:
        self._wake = asyncio.Event()
        if self._stop.is_set():
            self._wake.set()
        while True:
            final = self._stop.is_set()
            try:
                await self._tick(final)
            except Exception:
                log.debug("publisher tick failed", exc_info=True)
                self.rec.drop("error")
            if final:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), INTERVAL_S)
        self._count_unflushed()
        if self.nc is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.close(), 0.5)

    def _count_unflushed(self) -> None:
        if self.abandoned:
            return  # stop() timed out and counted them
        queued = len(self.rec.queue)
        self.rec.queue.clear()
        self.rec.drained += queued
        left = self._left(queued)
        self.backlog.clear()
        self.backlog_rows = 0
        for reason, n in left.items():
            self.rec.drop(reason, n)

    def _left(self, queued: int) -> dict[str, int]:
        """Unpublished rows by ``shutdown`` reason: queued and backlog iteration
        spans, backlog and still-queued generate calls."""
        left = {"shutdown": queued, LLM + "shutdown": len(llm_spans.take_pending(1 << 30))}
        for p in list(self.backlog):
            left[p.kind + "shutdown"] += p.rows
        return {k: v for k, v in left.items() if v}

    async def _tick(self, final: bool) -> None:
        self._drain()
        if not await self._ensure_connected(final):
            self._age_backlog()
            return
        await self._publish_graphs()
        await self._publish_backlog(final)
        await self._publish_drops()

    def _drain(self) -> None:
        """Queue -> encoded batches in the backlog; an overfull backlog drops its oldest."""
        q = self.rec.queue
        while q:
            rows: list[Row] = []
            while q and len(rows) < BATCH_ROWS:
                rows.append(q.popleft())
            self.rec.drained += len(rows)
            msg = schema.encode("iteration_span", iteration_batch(rows, self.rec.pid),
                                host=self.host, msg_id=f"{self.prefix}:{next(self.rec.seq)}")
            self.backlog.append(_Pending(msg, len(rows)))
            self.backlog_rows += len(rows)
        while recs := llm_spans.take_pending(LLM_BATCH_ROWS):
            msg = schema.encode("generate_span", generate_batch(recs), host=self.host,
                                msg_id=f"{self.prefix}:llm:{next(self.rec.seq)}")
            self.backlog.append(_Pending(msg, len(recs), kind=LLM))
            self.backlog_rows += len(recs)
        evicted = llm_spans.pending_evicted()
        if evicted > self.llm_evicted:
            self.rec.drop(LLM + "queue_full", evicted - self.llm_evicted)
            self.llm_evicted = evicted
        while self.backlog_rows > max(self.rec.cap, BACKLOG_ROWS) and len(self.backlog) > 1:
            self._discard(self.backlog.popleft())

    def _discard(self, p: _Pending) -> None:
        self.backlog_rows -= p.rows
        self.rec.drop(p.kind + "publish_failed", p.rows)

    def _age_backlog(self) -> None:
        for p in list(self.backlog):
            p.attempts += 1
        while self.backlog and self.backlog[0].attempts >= RETRY_TICKS:
            self._discard(self.backlog.popleft())

    async def _ensure_connected(self, final: bool) -> bool:
        if self.nc is not None and self.nc.is_connected:
            return True
        if self.nc is not None and not self.nc.is_closed:
            return False  # nats-py is reconnecting
        now = time.monotonic()
        if now < self._next_connect and not final:
            return False
        timeout = 2.0 if not final else max(0.05, min(2.0, self._deadline - now - 0.2))
        try:
            self.nc = await asyncio.wait_for(nats.connect(
                server_list(self.url), connect_timeout=min(1.0, timeout),
                allow_reconnect=True,
                max_reconnect_attempts=1, reconnect_time_wait=INTERVAL_S,
                error_cb=_quiet, name=f"aaco-instrument:{self.rec.pid}",
            ), timeout)
        except Exception:
            self.nc = None
            self.connect_failures += 1
            self._next_connect = now + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
            return False
        self.js = self.nc.jetstream()
        self._backoff = INTERVAL_S
        return True

    async def _publish(self, msg: schema.Message) -> bool:
        if self.js is None:
            return False
        try:
            await self.js.publish(msg.subject, msg.payload, headers=msg.headers,
                                              timeout=PUBLISH_TIMEOUT_S)
            return True
        except Exception:
            return False

    async def _publish_backlog(self, final: bool) -> None:
        while self.backlog:
            p = self.backlog[0]
            if not await self._publish(p.msg):
                self._age_backlog()
                return
            self.backlog.popleft()
            self.backlog_rows -= p.rows
            if p.kind == LLM:
                self.rec.generates_published += p.rows
            else:
                self.rec.published += p.rows

    async def _publish_graphs(self) -> None:
        with self.rec.lock:
            todo = [m for name, m in self.rec.models.items() if name not in self.graphs_done]
        for m in todo:
            if m.model_path is None:
                self.graphs_done.add(m.model)
                continue
            try:
                info = load_graph(m.model_path, m.model).info_table(self.rec.pid)
            except Exception as e:  # e.g. a transient race with the program importing onnx
                log.debug("graph_info of %s failed", m.model_path, exc_info=True)
                tries = self.graph_tries[m.model] = self.graph_tries.get(m.model, 0) + 1
                if isinstance(e, ModelError | OSError) or tries >= 3:
                    self.graphs_done.add(m.model)
                    self.rec.drop("error")
                continue
            msg = schema.encode("graph_info", info, host=self.host,
                                msg_id=f"{self.prefix}:graph:{m.model}")
            if await self._publish(msg):
                self.graphs_done.add(m.model)

    async def _publish_drops(self) -> None:
        with self.rec.lock:
            drops = dict(self.rec.drops)
        if not drops or drops == self.drops_sent:
            return
        msg = schema.encode("gauge_sample", drops_batch(drops, self.rec.pid, time.time_ns()),
                            host=self.host, msg_id=f"{self.prefix}:drops:{next(self.rec.seq)}")
        if await self._publish(msg):
            self.drops_sent = drops


async def _quiet(e: Exception) -> None:
    """nats-py's error callback: the instrumented program's logs stay clean."""
    del e

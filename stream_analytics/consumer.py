"""The analytics consumer: JetStream in, :class:`Analytics` results out.

It pulls ``kernel_span``, ``iteration_span``, ``graph_info``,
``sched_sample`` and ``gauge_sample`` messages through a durable pull
consumer and folds them into the engine. At most every ``flush_interval_s``
(and whenever the stream goes idle, unless ``idle_flush=False``) it
publishes changed keys' results on ``aaco.v1.analytics_result.<host>``.
At most every ``checkpoint_interval_s`` (``0``, the default: at every
flush; the daemon: 30 s), and whenever :data:`COMMIT_AFTER` messages await
their ack, it checkpoints and only then acknowledges the inputs folded in
since the last checkpoint: an input is never acknowledged before a
checkpoint holding its effect is stored.

Exactly-once state across restarts: the engine state and the stream
sequences it has folded in (those above the consumer's ack floor) are
checkpointed to the JetStream key-value bucket ``aaco_analytics`` before
the acks. A consumer killed at any point resumes from the last checkpoint;
the inputs folded in after it were not acknowledged and come back after
``ack_wait`` (:func:`ack_wait_s`: longer than the checkpoint interval, so
a live consumer's inputs are never redelivered to it). Redelivery is not in
order (a message fetched by the dead process comes back after ``ack_wait``,
behind newer ones), so the checkpoint keeps the set of processed sequences,
not a high-water mark; a redelivered message in that set is acknowledged
without being folded in again. The set is pruned to sequences above the ack
floor, so it stays bounded by ``max_ack_pending``.

Replicas: the durable consumer and the KV bucket get the stream's replica
count (:attr:`exporter.bus.Bus.replicas`, set by ``--stream-replicas``); an
existing durable or bucket with another count is changed at :meth:`start`.

Work sharing: on a stream with ``partitions=N`` (:class:`exporter.bus.BusConfig`),
``instances=M`` workers each run ``instance=k`` under their own durable name
and take the hosts of partitions ``p % M == k``; each checkpoints separately.

Host scoping: ``hosts=[name, ...]`` reads only those hosts' subjects (a node
daemon passes its own host, so a shared bus is not folded in by every node).
Results are published per host, on ``aaco.v1.<signal>.<that host>``, whatever
the worker's own host, so a worker serving several hosts feeds each node's
host-scoped sinks. An existing durable whose filter differs (a daemon
upgraded from reading every host) is updated in place at :meth:`start`.

Result message ids are
``<durable>:<generation>:<first>-<last>:<count>:<chain>:<host>`` (drift and
bottleneck tables add ``:d`` / ``:b`` before ``:<host>``), where the
generation counts flushes with new inputs (it is checkpointed), ``first``,
``last`` and ``count`` describe this flush's new sequences and ``chain`` is
a digest of every flush's sequence set since the last checkpoint. A
consumer that published and then died before checkpointing re-publishes,
from the checkpoint, the same flushes with the same ids (JetStream drops
each identical copy inside its duplicate window, which must span
:func:`redelivery_horizon_s`); any other history since the checkpoint gets
new ids, so a result of a different state is never deduplicated away. Until
the inputs of a dead consumer are redelivered (``ack_wait``), results
published after a restart may show less than those published before it
(at most one checkpoint interval's inputs).

A message that cannot be decoded is acknowledged, logged, and counted in
``drops[reason]`` (exported as ``aaco_exporter_events_dropped_total``).
A checkpoint that cannot be loaded (:mod:`stream_analytics.checkpoint`:
corrupt, foreign, too new, or holding a pickle) is never executed: it is
counted as ``drops["bad_checkpoint"]``, logged once, and the worker starts
fresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import time
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, KeyValueConfig
from nats.js.errors import APIError, BucketNotFoundError, KeyNotFoundError, NotFoundError

from exporter import schema
from exporter.bus import TRANSIENT, Bus
from exporter.fleet import host_subjects, split_by_host
from stream_analytics import checkpoint
from stream_analytics.engine import Analytics
from stream_analytics.verdicts import OnlineVerdicts

log = logging.getLogger("aaco.analytics")

INPUTS = ("kernel_span", "iteration_span", "graph_info", "sched_sample", "gauge_sample")
KV_BUCKET = "aaco_analytics"
IDLE_FLUSH_S = 0.05
"""How long the stream must stay quiet before folded-in messages are flushed (s)."""
ACK_SETTLE_S, ACK_SETTLE_TRIES = 0.02, 25
"""How often, and how many times, a caught-up drain asks again while the
server still counts acks it has not applied (see ``_caught_up``)."""
STOP_WAIT_S = 1.0
"""A fetch this short is waited out at a stop, not cancelled (see ``_fetch``)."""
SPAN_SIGNALS = frozenset({"kernel_span", "iteration_span", "graph_info"})
"""Inputs whose results are flushed as soon as the stream goes quiet."""
FOLD_ROWS = 1 << 16
"""Kernel spans folded as one table at most (consecutive messages of one host
in a fetch; a single larger message is folded whole): three messages of a
replayed CSV, one of a bounded session's 65,536-row messages."""
COMMIT_AFTER = 5_000
"""Messages awaiting their ack that force a checkpoint and the acks, whatever
the interval (the durable's ``max_ack_pending`` is 10x this)."""
ACK_WAIT_S = 10.0
"""``ack_wait`` when every flush checkpoints; else the margin added to the intervals."""


def ack_wait_s(checkpoint_interval_s: float, flush_interval_s: float) -> float:
    """The durable's ``ack_wait`` (s): :data:`ACK_WAIT_S` when every flush
    checkpoints (``checkpoint_interval_s <= 0``), else the longest an input
    waits for the checkpoint that holds it (``checkpoint_interval_s`` plus
    one ``flush_interval_s``) plus :data:`ACK_WAIT_S`.

    >>> ack_wait_s(0, 1.0), ack_wait_s(30.0, 1.0)
    (10.0, 41.0)
    """
    if checkpoint_interval_s <= 0:
        return ACK_WAIT_S
    return checkpoint_interval_s + flush_interval_s + ACK_WAIT_S


def redelivery_horizon_s(checkpoint_interval_s: float, flush_interval_s: float) -> float:
    """Longest time (s) from a result's publication to its re-publication by a
    consumer restarted at once after a crash: the result may be a whole
    checkpoint interval (plus a flush) older than the crash, and its inputs
    come back after ``ack_wait``. The stream's duplicate window must be at
    least this for the copy to be dropped (``run`` checks it).

    >>> redelivery_horizon_s(30.0, 1.0)
    72.0
    """
    return (max(checkpoint_interval_s, 0.0) + flush_interval_s
            + ack_wait_s(checkpoint_interval_s, flush_interval_s))


class AnalyticsConsumer:
    """One durable analytics worker.

    ``window_s=None`` evaluates the whole stream (captures); ``checkpoint``
    enables the KV checkpoint, written at most every ``checkpoint_interval_s``
    seconds (``0``: at every flush), inputs acknowledged after it;
    ``deliver_all`` replays the stream from its start on first creation (else
    only new messages). ``hosts`` limits the
    inputs to those hosts' subjects (``None``: every host); it cannot be
    combined with ``instances > 1``, which splits hosts by partition.
    ``fold_in_thread`` folds each fetched batch in a worker thread
    (``asyncio.to_thread``; the Arrow and numpy work releases the GIL), so
    another reader of the same event loop (a session's bundle sink) decodes
    meanwhile; the consumer's state is still touched by one step at a time.
    ``shared``: messages decoded once with the other in-process readers of
    the same stream (a session's bundle sink; :class:`schema.SharedDecode`).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        durable: str = "aaco-analytics",
        window_s: float | None = 30.0,
        checkpoint: bool = True,
        batch: int = 512,
        deliver_all: bool = True,
        session: str | None = None,
        flush_interval_s: float = 1.0,
        idle_flush: bool = True,
        instance: int = 0,
        instances: int = 1,
        sched_keys: bool = False,
        hosts: Sequence[str] | None = None,
        checkpoint_interval_s: float = 0.0,
        idle_fetch_s: float = 0.5,
        fold_in_thread: bool = False,
        shared: schema.SharedDecode | None = None,
    ) -> None:
        if not 0 <= instance < instances:
            raise ValueError(f"instance {instance} is not in 0..{instances - 1}")
        if hosts is not None and (not hosts or instances > 1):
            raise ValueError("hosts must be non-empty and cannot be combined with instances > 1")
        self.hosts = (None if hosts is None
                      else sorted({schema.sanitize_token(h) for h in hosts}))
        self.instance, self.instances = instance, instances
        self.bus = bus
        self.flush_interval_s = flush_interval_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.idle_flush = idle_flush
        self.idle_fetch_s = idle_fetch_s
        self.fold_in_thread = fold_in_thread
        self._shared = None if shared is None else shared.reader()
        self._unacked: list[Any] = []  # fetched since the last checkpoint
        self._spans_waiting = False  # spans folded in since the last flush
        self._new: list[int] = []
        self.hold_results = False
        """While True, a flush acknowledges what was folded in but publishes no
        results: they wait for the first flush after it is cleared (:meth:`drain`
        clears it once caught up, before settling). A bounded session holds
        them while it publishes, so its results do not depend on how its reads
        interleaved with its publisher: one row per key, from all its input."""
        self._last_flush = 0.0
        self._last_commit = 0.0
        self._chain = b""  # digest of the flushes' sequence sets since the checkpoint
        self._saved_generation = -1  # generation of the last checkpoint stored
        self.durable = durable
        self.sched_keys = sched_keys  # see Analytics: SII for processes without kernels
        self.engine = Analytics(window_s=window_s, sched_keys=sched_keys)
        self.verdicts = OnlineVerdicts()
        self.last_bottleneck: list[dict[str, Any]] = []
        self.checkpoint = checkpoint
        self.batch = batch
        self._inputs_since: float | None = None  # loop time of the first input since the flush
        self.deliver_all = deliver_all
        self.session = session
        self.last_seq = 0
        self._max_fetched = 0  # highest stream sequence fetched (folded in or skipped)
        self.processed: set[int] = set()
        self.generation = 0
        self._commits = 0
        self.received: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self.bus_errors: Counter[str] = Counter()  # transient errors by operation
        self.results_published = 0
        self._sub: Any = None
        self._kv: Any = None

    async def start(self) -> None:
        """Create or bind the durable consumer and load the checkpoint."""
        cfg = ConsumerConfig(
            durable_name=self.durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL if self.deliver_all else DeliverPolicy.NEW,
            filter_subjects=self.filter_subjects(),
            max_ack_pending=10 * COMMIT_AFTER,
            ack_wait=ack_wait_s(self.checkpoint_interval_s, self.flush_interval_s),
            num_replicas=self.bus.replicas,
        )
        await self._update_filter(cfg)
        self._sub = await self.bus.js.pull_subscribe(
            "", durable=self.durable, stream=self.bus.cfg.stream, config=cfg
        )
        if self.checkpoint:
            self._kv = await self._open_kv()
            try:
                entry = await self._kv.get(self.durable)
            except KeyNotFoundError:
                return
            self._restore(entry.value)

    async def _open_kv(self) -> Any:
        """The checkpoint bucket with the stream's replica count
        (:attr:`exporter.bus.Bus.replicas`): created so, or an existing
        bucket's count changed (a refused change is logged once and kept)."""
        n = self.bus.replicas
        try:
            kv = await self.bus.js.key_value(KV_BUCKET)
        except (BucketNotFoundError, NotFoundError):
            return await self.bus.js.create_key_value(
                KeyValueConfig(bucket=KV_BUCKET, history=1, replicas=n))
        stream = f"KV_{KV_BUCKET}"
        have = (await self.bus.js.stream_info(stream)).config
        old = have.num_replicas or 1
        if old != n:
            try:
                await self.bus.js.update_stream(dataclasses.replace(have, num_replicas=n))
            except APIError as e:
                log.warning("KV bucket %s keeps %d replica(s), not %d: the server refused the "
                            "change: %s", KV_BUCKET, old, n, e.description)
                return kv
            log.info("KV bucket %s: replicas %d -> %d", KV_BUCKET, old, n)
            await self.bus.wait_leader(stream, n)
        return kv

    def _restore(self, raw: bytes | None) -> None:
        """Load checkpoint ``raw`` (:mod:`stream_analytics.checkpoint`), or keep
        the fresh state: a corrupt, foreign or too-new checkpoint is counted
        in ``drops["bad_checkpoint"]`` and logged once; start-up goes on."""
        try:
            state, engine, verdicts = checkpoint.restore(raw)
        except BaseException as e:  # checked above; a loader bug must not stop start-up
            if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
                raise  # KeyboardInterrupt, cancellation; a Rust panic (pyo3) is caught
            self.drops["bad_checkpoint"] += 1
            log.error("checkpoint %s/%s refused, starting fresh: %s", KV_BUCKET,
                      self.durable, str(e)[:300])
            return
        self.engine, self.verdicts = engine, verdicts
        self.engine.sched_keys = self.sched_keys
        self.last_seq = int(state["last_seq"])
        self.processed = set(state.get("processed", []))
        self.generation = self._saved_generation = int(state.get("generation", 0))
        self.drops.update(state.get("drops", {}))
        log.info("resumed %s at stream sequence %d", self.durable, self.last_seq)

    async def _update_filter(self, cfg: ConsumerConfig) -> None:
        """Give an existing durable ``cfg``'s filter subjects, replica count
        and ``ack_wait`` if they differ (a refused replica change is logged once).

        nats-py binds to an existing durable without changing it, so a daemon
        upgraded to host scoping would otherwise keep reading every host.
        """
        try:
            info = await self.bus.js.consumer_info(self.bus.cfg.stream, self.durable)
        except NotFoundError:
            return
        c = info.config
        have = sorted(c.filter_subjects or ([c.filter_subject] if c.filter_subject else []))
        replicas = c.num_replicas or self.bus.replicas  # 0: the stream's count
        if have != sorted(cfg.filter_subjects or []):
            log.info("consumer %s: filter subjects %s -> %s", self.durable, have,
                     cfg.filter_subjects)
        elif replicas != cfg.num_replicas:
            log.info("consumer %s: replicas %d -> %s", self.durable, replicas, cfg.num_replicas)
        elif c.ack_wait != cfg.ack_wait:  # a checkpoint interval changed
            log.info("consumer %s: ack_wait %s -> %s s", self.durable, c.ack_wait, cfg.ack_wait)
        else:
            return
        try:
            await self.bus.js.add_consumer(self.bus.cfg.stream, config=cfg)
        except APIError as e:
            if have != sorted(cfg.filter_subjects or []):
                raise
            log.warning("consumer %s keeps %d replica(s), not %s: the server refused the "
                        "change: %s", self.durable, replicas, cfg.num_replicas, e.description)

    def filter_subjects(self) -> list[str]:
        """Every input subject, this instance's partitions, or ``hosts``' subjects.

        With ``hosts``: ``aaco.v1.<input>.<host>`` for each input and host
        (plus ``....<host>.*`` on a partitioned stream, see
        :func:`exporter.fleet.host_subjects`).

        With ``instances=M`` over a stream of ``N`` partitions (``N >= M``),
        instance ``k`` takes partitions ``p`` with ``p % M == k``: every host
        belongs to exactly one instance, so no window is counted twice.
        """
        if self.hosts is not None:
            return [f for s in INPUTS for h in self.hosts
                    for f in host_subjects(s, h, self.bus.cfg.partitions)]
        if self.instances == 1:
            return [f"{schema.SUBJECT_PREFIX}.{s}.>" for s in INPUTS]
        n = self.bus.cfg.partitions
        if n < self.instances:
            raise ValueError(f"{self.instances} instances need a stream of at least as many "
                             f"partitions (have {n}; set --partitions)")
        mine = [p for p in range(n) if p % self.instances == self.instance]
        return [f"{schema.SUBJECT_PREFIX}.{s}.*.{p}" for s in INPUTS for p in mine]

    async def step(self, timeout: float | None = None,
                   stop: asyncio.Event | None = None) -> int:
        """Fetch and fold one batch; returns the number of messages fetched.

        Flushes (results; the checkpoint and acks when due, see :meth:`flush`)
        when ``flush_interval_s`` has passed, :data:`COMMIT_AFTER` messages
        await their ack, or (with ``idle_flush``, the default) nothing was
        fetched. Without ``idle_flush`` (the daemon) a pause in the inputs
        waits for the interval too, so collectors ticking at different phases
        cost one flush per interval, not one each -- except after spans
        (``kernel_span``, ``iteration_span``, ``graph_info``): those are
        flushed once the stream stays quiet for :data:`IDLE_FLUSH_S`, so a
        span reaches the sinks well within a second (event latency) while the
        always-on background stays cheap. Once the interval has passed, the
        flush still waits for the inputs to pause (an empty fetch, at most
        :data:`IDLE_FLUSH_S`), so samples published together (a publish
        tick's gauge and scheduler batches) share one flush; a stream that
        never pauses is flushed one interval after its first input.

        The fetch waits at most ``timeout`` (default ``idle_fetch_s``), less
        when a flush or checkpoint falls due sooner (:meth:`fetch_timeout`); a
        message ends the wait at once. With ``stop``, setting it ends a wait
        longer than :data:`STOP_WAIT_S` too (see :meth:`_fetch`).
        """
        try:
            msgs = await self._fetch(self.fetch_timeout(timeout), stop)
        except (TimeoutError, NatsTimeout):
            msgs = []
        except TRANSIENT as e:  # connection lost mid-request: the server redelivers
            self._bus_error("fetch", e)
            await asyncio.sleep(0.1)
            msgs = []
        if self.fold_in_thread and msgs:
            await asyncio.to_thread(self._fold, msgs)
        else:
            self._fold(msgs)
        try:
            await self._after_fold(msgs)
        except TRANSIENT as e:  # checkpoint or acks failed: retried at the next commit
            self._bus_error("commit", e)
        return len(msgs)

    def _bus_error(self, what: str, e: BaseException) -> None:
        """Count a transient bus error (``bus_errors``; nothing is lost: what
        was not fetched or acknowledged is delivered again) and log it."""
        self.bus_errors[what] += 1
        log.warning("analytics %s failed, retrying: %s: %s", what, type(e).__name__, e)

    async def _after_fold(self, msgs: list[Any]) -> None:
        now = asyncio.get_running_loop().time()
        prompt = self.idle_flush or self._spans_waiting
        if msgs and self._inputs_since is None:
            self._inputs_since = now
        # Interval due: flush once the inputs pause (an empty fetch, at most
        # IDLE_FLUSH_S later), so samples published together -- a publish tick's
        # gauge and sched batches, fetched a few ms apart -- share one flush; a
        # stream that never pauses is flushed one interval after its first input.
        waited = now - (self._inputs_since if self._inputs_since is not None else now)
        due = now - self._last_flush >= self.flush_interval_s and (
            not msgs or self.idle_flush or waited >= self.flush_interval_s)
        if self._unacked and ((not msgs and prompt and self._new)
                              or len(self._unacked) >= COMMIT_AFTER or due):
            await self.flush()
        elif (not msgs and self.engine.window_s is not None and self.engine.held_kernels()
              and now - self._last_flush >= self.flush_interval_s):
            # an idle stream still resolves kernels whose grace ran out (results() does)
            await self._publish_results([])
            self.generation += 1
            self._last_flush = now
            if self._commit_due(now):
                await self._commit(now)

    def fetch_timeout(self, timeout: float | None = None) -> float:
        """How long the next fetch may wait (s): ``timeout`` (default
        ``idle_fetch_s``), cut to :data:`IDLE_FLUSH_S` when folded-in inputs
        await a prompt flush, and to the time left until the next flush or
        checkpoint falls due, or the next resolution of held kernels; at least
        :data:`IDLE_FLUSH_S`."""
        t = self.idle_fetch_s if timeout is None else timeout
        if self._new and (self.idle_flush or self._spans_waiting):
            return min(t, IDLE_FLUSH_S)
        now = asyncio.get_running_loop().time()
        to_flush = self.flush_interval_s - (now - self._last_flush)
        if self._new or (self._unacked and self._kv is None):
            t = min(t, to_flush)
        if self._unacked and self._kv is not None:
            t = min(t, max(to_flush, self.checkpoint_interval_s - (now - self._last_commit)))
        if self.engine.window_s is not None and self.engine.held_kernels():
            t = min(t, max(to_flush, IDLE_FLUSH_S))
        return max(IDLE_FLUSH_S, t)

    async def _fetch(self, timeout: float, stop: asyncio.Event | None) -> list[Any]:
        """One pull ``fetch`` of up to :attr:`batch` messages, waiting at most
        ``timeout``.

        ``stop`` set first cuts a long (idle, > :data:`STOP_WAIT_S`) fetch
        short and returns ``[]``; a short one is waited out and its messages
        returned. nats-py's fetch pops what it has received so far into a list
        that a cancellation throws away; the server then holds those messages
        as delivered until ``ack_wait`` (a capture's final results missed a
        quarter of its iterations, or its drain stalled 10 s). An idle pull
        rarely holds any; if it did, they are redelivered (to :meth:`drain`,
        which waits for them, or to the next run)."""
        if stop is None:
            return list(await self._sub.fetch(self.batch, timeout=timeout))
        fetch = asyncio.ensure_future(self._sub.fetch(self.batch, timeout=timeout))
        if timeout <= STOP_WAIT_S:
            return list(await fetch)
        halt = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({fetch, halt}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            halt.cancel()
        if not fetch.done():
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError, NatsTimeout):
                await fetch
            return []
        return list(fetch.result())

    def _fold(self, msgs: list[Any]) -> None:
        """Decode ``msgs`` and fold them into the engine, in order. Consecutive
        ``kernel_span`` batches of one host are folded as one table of at most
        :data:`FOLD_ROWS` rows (a replay's messages hold about 22,700 kernels
        each: three per fold instead of one cut the fold's CPU time by about a
        quarter, as much as 16 per fold did, with less memory; the busy union
        of a time bucket then sees those kernels sorted together). A fold that
        raises drops its messages, each counted as ``bad_values``."""
        self._unacked.extend(msgs)
        run: list[pa.RecordBatch] = []  # kernel_span batches of run_host not yet folded
        run_host = ""
        for m in msgs:
            seq = m.metadata.sequence.stream
            self._max_fetched = max(self._max_fetched, seq)
            if seq in self.processed:
                self.received["redelivered"] += 1
                continue
            self.processed.add(seq)
            self._new.append(seq)
            hdrs = m.headers or {}
            if self.session and hdrs.get(schema.H_SESSION) not in (None, self.session):
                continue
            try:
                signal, _, host, batch = (
                    schema.decode(m.data, hdrs) if self._shared is None
                    else self._shared(seq, m.data, hdrs))
            except schema.SchemaError as e:
                self.drops[e.reason] += 1
                log.warning("dropped message %s seq %d: %s", m.subject, seq, e)
                continue
            self.received[signal] += 1
            if signal in SPAN_SIGNALS:
                self._spans_waiting = True
            if run and (signal != "kernel_span" or host != run_host
                        or sum(b.num_rows for b in run) + batch.num_rows > FOLD_ROWS):
                self._ingest("kernel_span", run_host, run)
                run = []
            if signal == "kernel_span":
                run.append(batch)
                run_host = host
                continue
            self._ingest(signal, host, [batch])
        if run:
            self._ingest("kernel_span", run_host, run)

    def _ingest(self, signal: str, host: str, batches: list[pa.RecordBatch]) -> None:
        """Fold ``batches`` (decoded messages of one signal and host) into the
        engine (and gauges into the verdicts) as one table."""
        t = pa.Table.from_batches(batches)
        try:
            if signal == "gauge_sample":
                self.verdicts.ingest_gauges(host, t)
            self.engine.ingest(signal, host, t)
        except Exception as e:  # bad values inside a well-formed batch
            self.drops["bad_values"] += len(batches)
            log.warning("dropped %d %s message(s) of host %s: %s", len(batches), signal,
                        host, e)

    async def flush(self, commit: bool = False) -> None:
        """Publish the results of what was folded in since the last flush;
        then, when ``commit`` or due (:meth:`_commit_due`), checkpoint and ack
        everything folded in since the last checkpoint."""
        self._spans_waiting = False
        self._inputs_since = None
        if self._new and not self.hold_results:
            new, self._new = self._new, []
            self.last_seq = max(self.last_seq, *new)
            await self._publish_results(new)
            self.generation += 1
        now = asyncio.get_running_loop().time()
        self._last_flush = now
        if commit or self._commit_due(now):
            await self._commit(now)

    def _commit_due(self, now: float) -> bool:
        """Whether the checkpoint (and the acks after it) is due: without a
        KV checkpoint, at every flush; else once ``checkpoint_interval_s`` has
        passed since the last one or :data:`COMMIT_AFTER` messages wait."""
        return (self._kv is None or now - self._last_commit >= self.checkpoint_interval_s
                or len(self._unacked) >= COMMIT_AFTER)

    async def _commit(self, now: float) -> None:
        """Checkpoint (when the state changed since the last one), then ack
        every message fetched before it. A failed checkpoint raises and acks
        nothing: the messages stay unacknowledged until a later commit."""
        if self.generation != self._saved_generation:
            await self._save()
            self._saved_generation = self.generation
        self._chain = b""
        unacked, self._unacked = self._unacked, []
        for i, m in enumerate(unacked):
            try:
                await m.ack()
            except BaseException:  # the connection dropped: ack the rest next time
                self._unacked[:0] = unacked[i:]
                raise
        self._last_commit = now
        self._commits += 1
        if self._commits % 50 == 0 or self.checkpoint_interval_s >= 1.0:
            await self._prune()  # at most once a second

    async def _prune(self) -> None:
        """Forget processed sequences at or below the ack floor (never redelivered)."""
        info = await self._sub.consumer_info()
        floor = int(info.ack_floor.stream_seq or 0)
        self.processed = {s for s in self.processed if s > floor}

    async def _publish_per_host(self, signal: str, table: pa.Table, key: str) -> None:
        """Publish ``table``'s rows on each row's host subject, id ``key:<host>``."""
        for host, rows in split_by_host(table, self.bus.host):
            await self.bus.publish_table(signal, rows, f"{key}:{host}", host=host)

    def _flush_key(self, new: Sequence[int]) -> str:
        """This flush's message id stem (see the module doc); the chain digest
        extends the previous one with this flush's sorted new sequences."""
        seqs = array("q", sorted(new)).tobytes()
        self._chain = hashlib.blake2b(self._chain + seqs, digest_size=6).digest()
        first, last = (min(new), max(new)) if new else (self.last_seq, self.last_seq)
        return f"{self.durable}:{self.generation}:{first}-{last}:{len(new)}:{self._chain.hex()}"

    async def _publish_results(self, new: Sequence[int]) -> None:
        """Publish the changed keys' results (and drift, bottleneck) of the
        flush whose new stream sequences are ``new``."""
        table = self.engine.results(only_dirty=True)
        key = self._flush_key(new)
        if table.num_rows:
            await self._publish_per_host("analytics_result", table, key)
            self.results_published += table.num_rows
        if table.num_rows or self.verdicts.pending:
            try:
                drift, verdicts = self.verdicts.update(table)
            except Exception as e:  # a verdict bug must not stop the metrics
                self.drops["verdict_error"] += 1
                log.warning("drift/bottleneck update failed: %s", e)
                return
            if drift.num_rows:
                await self._publish_per_host("drift_status", drift, key + ":d")
            if verdicts.num_rows:
                await self._publish_per_host("bottleneck", verdicts, key + ":b")
                self.last_bottleneck = verdicts.to_pylist()

    async def _save(self) -> None:
        if self._kv is None:
            return
        state = {"engine": self.engine.to_dict(), "last_seq": self.last_seq,
                 "processed": sorted(self.processed), "generation": self.generation,
                 "drops": dict(self.drops), "verdicts": self.verdicts.to_dict()}
        await self._kv.put(self.durable, checkpoint.encode(state))

    async def _caught_up(self) -> bool:
        """Flush what is folded in; True when the server has nothing more to
        deliver, this worker has read the last message it delivered, and no
        message it delivered is missing here.

        Missing: more messages await their ack on the server than this worker
        holds unacknowledged (a fetch cancelled after receiving them, or an
        answer lost on the way). The server delivers them again after
        ``ack_wait``, and the drain waits for them rather than publish results
        without them. The server applies acks asynchronously, so a surplus
        is asked again a few times (:data:`ACK_SETTLE_S` apart) first."""
        try:
            if self._new or self._unacked:
                await self.flush()
            for _ in range(ACK_SETTLE_TRIES):
                info = await self._sub.consumer_info()
                if int(info.num_pending) or \
                        int(info.delivered.stream_seq or 0) > self._max_fetched:
                    return False
                if int(info.num_ack_pending) <= len(self._unacked):
                    return True
                await asyncio.sleep(ACK_SETTLE_S)
        except TRANSIENT as e:  # not known yet: the drain loop asks again
            self._bus_error("consumer_info", e)
        return False

    async def pending(self) -> int:
        """Messages not yet delivered or not yet acknowledged."""
        info = await self._sub.consumer_info()
        return int(info.num_pending) + int(info.num_ack_pending)

    async def drain(self, idle_polls: int = 2, caught_up: bool = False) -> None:
        """Process until nothing is pending (used at the end of a capture), then
        resolve the kernels still waiting for an iteration span (every span of
        the session has arrived: :meth:`Analytics.settle`), publish and
        checkpoint. An empty fetch checkpoints and acks at once, whatever
        ``checkpoint_interval_s``: messages awaiting their ack are pending.

        Without ``caught_up`` it stops after ``idle_polls`` empty fetches in a
        row (0.2 s each) with nothing pending. ``caught_up=True`` is for a
        publisher that has finished (every input is stored: a session's
        drain): it stops as soon as the consumer has nothing left to deliver
        and the last message it delivered has been folded in and flushed,
        without waiting for empty fetches."""
        idle = 0
        while idle < idle_polls:
            if caught_up and await self._caught_up():
                break
            n = await self.step(timeout=0.2)
            if n == 0 and (self._unacked or self._new):
                await self.flush(commit=True)
            if n == 0 and await self.pending() == 0:
                idle += 1
            else:
                idle = 0
        self.hold_results = False
        if self.engine.settle():
            await self._publish_results([])
            self.generation += 1
        await self.flush(commit=True)

    async def run(self, stop: asyncio.Event,
                  busy: Callable[[float], None] | None = None) -> None:
        """Loop until ``stop`` is set; never raises on bad input. At the end,
        publishes, checkpoints and acks what was folded in last. ``busy``
        is given the seconds of each step that fetched messages (fetch,
        fold and flush; a session times its analytics with it)."""
        while not stop.is_set():
            try:
                t = time.perf_counter()
                if await self.step(stop=stop) and busy is not None:
                    busy(time.perf_counter() - t)
            except Exception as e:  # keep the daemon alive; the bus reconnects
                self.drops["consumer_error"] += 1
                log.error("analytics step failed: %s", e)
                await asyncio.sleep(0.5)
        try:
            await self.flush(commit=True)
        except Exception as e:
            log.error("final analytics flush failed: %s", e)

"""The NATS/JetStream bus: connect, publish batches, consume durably.

Subjects are ``aaco.v1.<signal>.<host>`` (:func:`exporter.schema.subject`).
One JetStream stream (default ``AACO``) captures ``aaco.v1.>`` with limits
retention (``max_age_s``, ``max_bytes``) and a duplicate window, so a consumer
restarted within retention loses nothing and a re-published message id is
stored once. With ``partitions=N`` the stream stores
``aaco.v1.<signal>.<host>`` as ``aaco.v1.<signal>.<host>.<p>`` (NATS
``partition(N)`` subject transform on the host token), which lets several
analytics instances share the hosts; filters ending in ``>`` see both forms.

Clusters: ``url`` may list several servers, comma-separated
(``nats://a:4222,nats://b:4222,nats://c:4222``); the client connects to one
and fails over to the others. ``stream_replicas=N`` creates the stream with N
replicas (the analytics KV bucket and durable consumers follow it, see
:attr:`Bus.replicas`) and changes an existing stream's count to N; ``None``
creates a new stream with one replica and keeps an existing stream's count.
A change the server refuses (a single server, too few peers) is logged once
and the stream keeps its count.

Publishing through outages: a message whose publish fails (server down,
restarting, no acknowledgement in time) goes to the bus's
:class:`exporter.outbox.Outbox` and every later message queues behind it; a
background task publishes them in order once the connection is back. Before
it does, it makes the redelivery exact even after an outage longer than the
stream's duplicate window (:meth:`Bus._find_stored`): it sends a barrier the
stream must reject (``Nats-Expected-Stream`` set to a name no stream has), so
every message this connection sent earlier has been stored or refused, then
reads the ``Nats-Msg-Id`` headers the stream stored since the smallest
acknowledged sequence the held messages saw before their first attempt (an
ephemeral headers-only consumer), and skips held messages already stored.
This holds for one server (or one stream leader); across a leader change the
duplicate window still applies.

Errors: :class:`BusError` when the server cannot be reached after the bounded
retries (the message names the URL and the last error).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import exporter.nats_import  # noqa: F401  # before nats-py: see that module

# isort: split
import nats
import nats.errors
import pyarrow as pa
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
    SubjectTransform,
)
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from collectors.base import Emit
from exporter import schema
from exporter.busconfig import BusConfig as BusConfig
from exporter.busconfig import BusError as BusError
from exporter.nats_urls import server_list
from exporter.outbox import Held, Outbox

log = logging.getLogger("aaco.bus")


_PARTITION = re.compile(r"partition\((\d+),")


BARRIER_STREAM = "__aaco_outbox_barrier__"
"""Expected-stream name of the resync barrier; no stream has it, so it is never stored."""
TRANSIENT = (nats.errors.Error, OSError, TimeoutError)
"""Publish failures that mean "not now" (the message is held); a JetStream API
error other than 503 is a refusal and is dropped as ``rejected``."""

_last_error: list[Exception] = []
CLIENT_ERRORS: Counter[str] = Counter()
"""nats-py client errors by type (``SlowConsumerError`` means dropped messages)."""


async def _log_error(e: Exception) -> None:
    """nats-py's error callback: counted, one log line, never a traceback."""
    _last_error[:] = [e]
    CLIENT_ERRORS[type(e).__name__] += 1
    log.warning("nats: %s: %s", type(e).__name__, e)


def websocket_transport() -> None:
    """Give nats-py's WebSocket transport the ``aiohttp`` (and ``multidict``)
    that :mod:`exporter.nats_import` kept it from importing at start-up; ``ImportError``
    when aiohttp is not installed (as nats-py raises then)."""
    import aiohttp
    import multidict
    import nats.aio.transport as transport

    setattr(transport, "aiohttp", aiohttp)  # noqa: B010  # not an exported name
    setattr(transport, "multidict", multidict)  # noqa: B010


async def connect(url: str, cfg: BusConfig) -> Client:
    """Connect with bounded retries (``cfg.connect_attempts``, backoff 0.5 s x2).

    ``url`` may name several servers of one cluster, comma-separated
    (:func:`server_list`); nats-py then reconnects to another one when its
    server goes away.
    """
    if any(u.startswith(("ws://", "wss://")) for u in server_list(url)):
        websocket_transport()
    last: BaseException | None = None
    delay = 0.5
    for attempt in range(cfg.connect_attempts):
        try:
            return await asyncio.wait_for(nats.connect(
                server_list(url),
                connect_timeout=cfg.connect_timeout_s,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                user=cfg.user,
                password=cfg.password,
                token=cfg.token,
                user_credentials=cfg.creds_file,
                tls=cfg.tls_context(),
                pending_size=64 * 1024 * 1024,
                error_cb=_log_error,
            ), timeout=cfg.connect_timeout_s + 1.0)
        except Exception as e:  # nats-py raises several unrelated types
            # A timed-out attempt hides the cause (TLS, auth); nats-py reported it to error_cb.
            last = _last_error[0] if _last_error and isinstance(e, TimeoutError) else e
            _last_error.clear()
            if attempt + 1 < cfg.connect_attempts:
                await asyncio.sleep(delay)
                delay *= 2
    raise BusError(
        f"cannot reach NATS at {url} after {cfg.connect_attempts} attempts: "
        f"{type(last).__name__}: {last}"
    )


class Bus:
    """A connected bus for one host (and optionally one capture session)."""

    def __init__(self, nc: Client, cfg: BusConfig, host: str, session: str | None = None):
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.cfg = cfg
        self.host = host
        self.session = session
        self.published_messages = 0
        self.published_rows = 0
        self.replicas = cfg.stream_replicas or 1
        """The stream's replica count (known after :meth:`ensure_stream`); the
        analytics KV bucket and durable consumers use it too."""
        self.acked_seq = 0  # highest stream sequence acknowledged to this bus
        self.redelivered = 0  # held messages published after an outage
        self.already_stored = 0  # held messages found stored (ack lost), not re-sent
        self.outbox = Outbox(cfg.outbox_max_bytes,
                             Path(cfg.outbox_dir) if cfg.outbox_dir else None,
                             cfg.outbox_memory_bytes, temp_spool=cfg.outbox_dir is None)
        self._drainer: asyncio.Task[None] | None = None
        self._resync = False
        self._stored_ids: set[str] = set()
        self._resync_errors: set[str] = set()  # logged once each

    @classmethod
    async def open(
        cls, url: str, cfg: BusConfig, host: str, session: str | None = None
    ) -> Bus:
        """Connect to ``url`` and make sure the stream exists."""
        bus = cls(await connect(url, cfg), cfg, host, session)
        await bus.ensure_stream()
        n = bus.outbox.load()
        if n:
            log.info("outbox: %d messages left in %s by an earlier run; publishing them",
                     n, cfg.outbox_dir)
            bus._resync = True
            bus._kick()
        return bus

    async def ensure_stream(self) -> None:
        """Create (or update) the JetStream stream over ``aaco.v1.>``."""
        sc = StreamConfig(
            name=self.cfg.stream,
            subjects=[f"{schema.SUBJECT_PREFIX}.>"],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            max_age=self.cfg.max_age_s,
            max_bytes=self.cfg.max_bytes,
            duplicate_window=self.cfg.duplicate_window_s,
        )
        if self.cfg.partitions > 1:
            # Stored subjects become aaco.v1.<signal>.<host>.<p>, p = hash(host) mod N,
            # so analytics instances can split hosts between them (see consumer).
            sc.subject_transform = SubjectTransform(
                src=f"{schema.SUBJECT_PREFIX}.*.*",
                dest=f"{schema.SUBJECT_PREFIX}.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}."
                     f"{{{{partition({self.cfg.partitions},2)}}}}")
        sc.num_replicas = self.replicas
        try:
            info = await self.js.add_stream(sc)
        except APIError as e:  # exists with another config (or cannot be created)
            try:
                have = await self.js.stream_info(self.cfg.stream)
            except NotFoundError:
                raise BusError(f"cannot create stream {sc.name} with {sc.num_replicas} "
                               f"replica(s): {e.description}") from None
            info = await self._adopt(sc, have)
        self.replicas = info.config.num_replicas or 1

    async def _adopt(self, sc: StreamConfig, have: StreamInfo) -> StreamInfo:
        """Bring the existing stream ``have`` to ``sc`` (see :meth:`ensure_stream`)."""
        old = have.config.num_replicas or 1
        if self.cfg.stream_replicas is None:
            sc.num_replicas = old  # a client that asks for no count keeps the stream's
        if self.cfg.partitions <= 1:
            # A client that asks for no partitions (a node daemon, capture,
            # replay, an instrumented process) keeps an operator's
            # partitioned stream as it is and learns N from it.
            tr = have.config.subject_transform
            m = _PARTITION.search(tr.dest) if tr is not None and tr.dest else None
            if m is not None:
                self.cfg.partitions = int(m.group(1))
                if sc.num_replicas != old:
                    log.warning("stream %s keeps %d replica(s), not %d: it is partitioned, so "
                                "this client leaves its config alone (`analytics --partitions "
                                "N --stream-replicas R` sets them)", sc.name, old, sc.num_replicas)
                return have
        try:
            info = await self.js.update_stream(sc)
        except APIError as e:
            if sc.num_replicas == old:
                raise BusError(f"cannot update stream {sc.name}: {e.description}") from None
            log.warning("stream %s keeps %d replica(s), not %d: the server refused the "
                        "change: %s", sc.name, old, sc.num_replicas, e.description)
            sc.num_replicas = old
            try:
                return await self.js.update_stream(sc)
            except APIError as e2:
                raise BusError(f"cannot update stream {sc.name}: {e2.description}") from None
        if sc.num_replicas != old:
            log.info("stream %s: replicas %d -> %d", sc.name, old, sc.num_replicas)
            await self.wait_leader(self.cfg.stream, sc.num_replicas or 1)
        return info

    async def wait_leader(self, stream: str, replicas: int = 1,
                          timeout_s: float = 30.0) -> str:
        """Wait until ``stream`` (or a KV bucket's ``KV_<bucket>``) has a
        leader and its peer group counts ``replicas`` servers, as after a
        replica change (before that the server refuses consumers with that
        count); returns the leader's name ("" when the server names none).
        Raises :class:`BusError` after ``timeout_s`` seconds."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            cl = (await self.js.stream_info(stream)).cluster
            if cl is None:
                return ""
            if cl.leader and 1 + len(cl.replicas or []) >= replicas:
                return cl.leader
            if asyncio.get_running_loop().time() > deadline:
                raise BusError(f"stream {stream} has no leader of {replicas} replica(s) "
                               f"after {timeout_s} s")
            await asyncio.sleep(0.05)

    async def publish_table(
        self, signal: str, table: pa.Table | pa.RecordBatch, key: str,
        host: str | None = None,
    ) -> int:
        """Publish ``table`` as one or more messages; returns the count.

        A message whose JetStream ack does not come in time is held by the
        outbox and published again later, unless the stream turns out to have
        stored it (see the module docstring); it is never lost silently.

        The subject and ``Aaco-Host`` header name ``host`` (default: the
        bus's own host); an analytics worker serving several hosts passes
        each result's host so it lands on that host's subject.
        """
        n = 0
        for msg in schema.encode_chunks(
            signal,
            table,
            host=self.host if host is None else host,
            msg_id_prefix=key,
            max_bytes=self.cfg.max_payload_bytes,
            session=self.session,
        ):
            await self._send(msg)
            n += 1
        self.published_messages += n
        self.published_rows += table.num_rows
        return n

    async def publish(self, emits: Sequence[Emit]) -> int:
        """Publish a collector's output in order; returns messages sent."""
        n = 0
        for e in emits:
            n += await self.publish_table(e.signal, e.batch, e.key)
        return n

    async def send(self, msg: schema.Message) -> None:
        """Publish one already encoded message (:mod:`exporter.schema`) through
        the outbox, like :meth:`publish_table` does for each of its messages."""
        await self._send(msg)
        self.published_messages += 1

    async def _send(self, msg: schema.Message) -> None:
        """Publish one message, or hold it (in order) when the bus cannot take it."""
        if len(self.outbox) or not self.nc.is_connected:
            self._hold(Held(msg.subject, dict(msg.headers), msg.payload))
            return
        floor = self.acked_seq
        try:
            ack = await self.js.publish(msg.subject, msg.payload, headers=msg.headers)
        except APIError as e:
            if not isinstance(e, ServiceUnavailableError):
                self.outbox.drop("rejected", why=f"{msg.subject}: {e}")
                return
            self._failed(Held(msg.subject, dict(msg.headers), msg.payload, floor), e)
        except TRANSIENT as e:
            self._failed(Held(msg.subject, dict(msg.headers), msg.payload, floor), e)
        else:
            self._acked(ack)

    def _acked(self, ack: PubAck) -> None:
        if ack.seq is not None and ack.seq > self.acked_seq:
            self.acked_seq = int(ack.seq)

    def _failed(self, m: Held, e: BaseException) -> None:
        if not len(self.outbox):
            log.warning("publish failed (%s: %s); holding messages in the outbox until the "
                        "bus is back", type(e).__name__, e)
        self._resync = True
        self._hold(m)

    def _hold(self, m: Held) -> None:
        if self.outbox.put(m):
            self._kick()

    def _kick(self) -> None:
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        """Publish the held messages in order once connected (the outbox task)."""
        delay = 0.1
        while len(self.outbox) and not self.nc.is_closed:
            if not self.nc.is_connected:
                await asyncio.sleep(0.1)
                continue
            m = self.outbox.peek()
            assert m is not None
            floor = self.acked_seq
            self.outbox.attempted(floor)  # before the await: a cancel may cut it short
            if self._resync:
                try:
                    await self._find_stored()
                except Exception as e:  # not back yet, or the stream cannot be read yet
                    if type(e).__name__ not in self._resync_errors:
                        self._resync_errors.add(type(e).__name__)
                        log.warning("outbox: cannot check the stream yet (%s: %s); retrying",
                                    type(e).__name__, e)
                    await self._retry_later(floor, delay)
                    delay = min(2.0, delay * 2)
                    continue
                self._resync = False
            try:
                if m.msg_id and m.msg_id in self._stored_ids:
                    self.already_stored += 1
                    self.outbox.pop()
                    continue
                ack = await self.js.publish(m.subject, m.payload, headers=m.headers)
            except APIError as e:
                if isinstance(e, ServiceUnavailableError):
                    await self._retry_later(floor, delay)
                    delay = min(2.0, delay * 2)
                    continue
                self.outbox.drop("rejected", why=f"{m.subject}: {e}")
                self.outbox.pop()
                continue
            except TRANSIENT:
                await self._retry_later(floor, delay)
                delay = min(2.0, delay * 2)
                continue
            delay = 0.1
            self._acked(ack)
            self.redelivered += 1
            self.outbox.pop()
        if not len(self.outbox):
            self._stored_ids.clear()
            if self.redelivered or self.already_stored:
                log.info("outbox drained: %d messages published late, %d already stored",
                         self.redelivered, self.already_stored)

    async def _retry_later(self, floor: int, delay: float) -> None:
        self.outbox.attempted(floor)
        self._resync = True
        await asyncio.sleep(delay)

    async def _find_stored(self) -> None:
        """Add to ``_stored_ids`` the ids the stream stored above the held floor.

        First a barrier: a publish the stream refuses (expected stream
        :data:`BARRIER_STREAM`), answered only after the stream has processed
        everything this connection sent before it (nats-py resends its
        reconnect buffer first). Raises the transient errors of a bus that is
        not back yet.
        """
        await self.ensure_stream()  # a server that lost its store gets the stream back
        try:
            await self.js.publish(f"{schema.SUBJECT_PREFIX}.outbox_barrier."
                                  f"{schema.sanitize_token(self.host)}", b"", headers={},
                                  stream=BARRIER_STREAM)
        except ServiceUnavailableError:
            raise
        except APIError:
            pass  # the expected refusal
        floor = self.outbox.min_floor
        if floor is None:
            return
        info = await self.js.stream_info(self.cfg.stream)
        last, start = int(info.state.last_seq), max(floor + 1, int(info.state.first_seq))
        if start > last:
            return
        sub = await self.js.pull_subscribe(
            f"{schema.SUBJECT_PREFIX}.>", durable=None, stream=self.cfg.stream,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                  opt_start_seq=start, ack_policy=AckPolicy.NONE,
                                  headers_only=True, inactive_threshold=5.0))
        seq = start - 1
        try:
            while seq < last:
                try:
                    msgs = await sub.fetch(min(1024, last - seq), timeout=2.0)
                except (TimeoutError, nats.errors.TimeoutError):
                    log.warning("outbox: stream scan stopped at %d of %d", seq, last)
                    break
                for msg in msgs:
                    seq = max(seq, int(msg.metadata.sequence.stream))
                    mid = (msg.headers or {}).get("Nats-Msg-Id")
                    if mid:
                        self._stored_ids.add(mid)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        log.info("outbox: scanned stream sequences %d-%d for held messages already stored",
                 start, seq)

    async def flush_outbox(self, timeout_s: float | None = None) -> int:
        """Wait until the outbox is empty (at most ``timeout_s``, default
        ``cfg.outbox_drain_timeout_s``); returns the messages still held."""
        task = self._drainer
        if task is not None and not task.done():
            t = self.cfg.outbox_drain_timeout_s if timeout_s is None else timeout_s
            await asyncio.wait({task}, timeout=t)
        return len(self.outbox)

    async def close(self) -> None:
        """Publish what is held (briefly), then close the connection.

        What is still held afterwards is written to a persistent spool
        (``cfg.outbox_dir``) for the next run, or else counted as dropped
        under ``undelivered_at_exit``.
        """
        try:
            if len(self.outbox) and self.nc.is_connected:
                await self.flush_outbox(min(5.0, self.cfg.outbox_drain_timeout_s))
            if self._drainer is not None and not self._drainer.done():
                self._drainer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._drainer
            if len(self.outbox):
                if self.cfg.outbox_dir is not None:
                    self.outbox.persist()
                    log.warning("outbox: %d messages (%d bytes) kept in %s for the next run",
                                len(self.outbox), self.outbox.held_bytes, self.cfg.outbox_dir)
                else:
                    self.outbox.clear("undelivered_at_exit")
            if not self.nc.is_closed:
                try:
                    await self.nc.flush(timeout=2)
                finally:
                    await self.nc.close()
        finally:
            self.outbox.cleanup()

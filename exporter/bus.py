"""The NATS/JetStream bus: connect, publish batches, consume durably.

Subjects are ``aaco.v1.<signal>.<host>`` (:func:`exporter.schema.subject`).
One JetStream stream (default ``AACO``) captures ``aaco.v1.>`` with limits
retention (``max_age_s``, ``max_bytes``) and a duplicate window, so a consumer
restarted within retention loses nothing and a re-published message id is
stored once. With ``partitions=N`` the stream stores
``aaco.v1.<signal>.<host>`` as ``aaco.v1.<signal>.<host>.<p>`` (NATS
``partition(N)`` subject transform on the host token), which lets several
analytics instances share the hosts; filters ending in ``>`` see both forms.

Errors: :class:`BusError` when the server cannot be reached after the bounded
retries (the message names the URL and the last error).
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import nats
import pyarrow as pa
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig, SubjectTransform
from nats.js.errors import BadRequestError

from collectors.base import Emit
from exporter import schema

log = logging.getLogger("aaco.bus")


_PARTITION = re.compile(r"partition\((\d+),")


class BusError(RuntimeError):
    """The bus is unreachable or refused an operation."""


PUBLISH_ATTEMPTS = 4
"""Sends of one message before a missing JetStream ack is an error."""


@dataclass
class BusConfig:
    """Where and how to connect. ``url=None`` means the embedded server.

    Credentials follow nats-py: ``user``/``password``, ``token`` or an NKey/JWT
    ``creds_file``; TLS with ``tls_ca`` (and ``tls_cert``/``tls_key`` for mTLS).
    """

    url: str | None = None
    stream: str = "AACO"
    max_age_s: float = 3600.0
    max_bytes: int = 1 << 30
    duplicate_window_s: float = 120.0
    connect_attempts: int = 5
    connect_timeout_s: float = 2.0
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    max_payload_bytes: int = 900_000
    partitions: int = 1  # >1: the stream appends a partition(N, host) subject token
    extra: dict[str, object] = field(default_factory=dict)

    def tls_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca or self.tls_cert):
            return None
        ctx = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        return ctx


_last_error: list[Exception] = []
CLIENT_ERRORS: Counter[str] = Counter()
"""nats-py client errors by type (``SlowConsumerError`` means dropped messages)."""


async def _log_error(e: Exception) -> None:
    """nats-py's error callback: counted, one log line, never a traceback."""
    _last_error[:] = [e]
    CLIENT_ERRORS[type(e).__name__] += 1
    log.warning("nats: %s: %s", type(e).__name__, e)


async def connect(url: str, cfg: BusConfig) -> Client:
    """Connect with bounded retries (``cfg.connect_attempts``, backoff 0.5 s x2)."""
    last: BaseException | None = None
    delay = 0.5
    for attempt in range(cfg.connect_attempts):
        try:
            return await asyncio.wait_for(nats.connect(
                url,
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
        self.publish_retries = 0

    @classmethod
    async def open(
        cls, url: str, cfg: BusConfig, host: str, session: str | None = None
    ) -> Bus:
        """Connect to ``url`` and make sure the stream exists."""
        bus = cls(await connect(url, cfg), cfg, host, session)
        await bus.ensure_stream()
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
        try:
            await self.js.add_stream(sc)
        except BadRequestError:
            if self.cfg.partitions <= 1:
                # A client that asks for no partitions (a node daemon, capture,
                # replay, an instrumented process) keeps an operator's
                # partitioned stream as it is and learns N from it.
                info = await self.js.stream_info(self.cfg.stream)
                tr = info.config.subject_transform
                m = _PARTITION.search(tr.dest) if tr is not None and tr.dest else None
                if m is not None:
                    self.cfg.partitions = int(m.group(1))
                    return
            await self.js.update_stream(sc)

    async def publish_table(
        self, signal: str, table: pa.Table | pa.RecordBatch, key: str,
        host: str | None = None,
    ) -> int:
        """Publish ``table`` as one or more messages; returns the count.

        A message whose JetStream ack does not come in time is sent again with
        the same message id (deduplicated by the stream) up to
        :data:`PUBLISH_ATTEMPTS` times in all (``publish_retries`` counts the
        re-sends); then ``nats.errors.TimeoutError`` is raised.

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
            for attempt in range(PUBLISH_ATTEMPTS):
                try:
                    await self.js.publish(msg.subject, msg.payload, headers=msg.headers)
                    break
                except NatsTimeoutError:
                    # No ack in time (a busy server): send again. The message id
                    # is the same, so a copy that was stored is dropped as a duplicate.
                    if attempt == PUBLISH_ATTEMPTS - 1:
                        raise
                    self.publish_retries += 1
                    await asyncio.sleep(0.1 * 2**attempt)
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

    async def close(self) -> None:
        if not self.nc.is_closed:
            try:
                await self.nc.flush(timeout=2)
            finally:
                await self.nc.close()

"""Where and how the bus connects (:class:`BusConfig`), and its error (:class:`BusError`).

Kept apart from :mod:`exporter.bus` (which imports nats-py and pyarrow) so
that the command line can name the defaults and catch the error without
importing either: ``aaco-exporter --help`` starts in a fraction of the time.
:mod:`exporter.bus` re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl


class BusError(RuntimeError):
    """The bus is unreachable or refused an operation."""


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
    stream_replicas: int | None = None  # None: 1 for a new stream, an existing one keeps its own
    outbox_max_bytes: int = 256 << 20  # messages held while the bus is down, bytes
    outbox_dir: str | None = None  # persistent spool; None: a temporary one
    outbox_memory_bytes: int = 8 << 20  # held in memory before spilling to the spool
    outbox_drain_timeout_s: float = 60.0  # flush_outbox's wait at the end of a session
    extra: dict[str, object] = field(default_factory=dict)

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context of ``tls_ca``/``tls_cert``/``tls_key``; ``None`` without them."""
        import ssl

        if not (self.tls_ca or self.tls_cert):
            return None
        ctx = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        return ctx

"""The bus outbox: messages that could not be published, held in order.

When a JetStream publish fails (the server is down, restarting, or did not
acknowledge in time) :class:`exporter.bus.Bus` puts the message here instead
of dropping it, and every later message queues behind it until the outbox has
drained, so a subject's messages reach the stream in the order they were made.

Storage: the oldest messages stay in memory up to ``memory_bytes``; past that,
new ones are spilled to a spool directory, one file per message
(``<seq:016d>.msg``: a 4-byte big-endian header length, a JSON header with
``subject``, ``headers`` and ``floor``, then the payload), written to a
temporary name and renamed, so a crash leaves whole files only. Messages are
taken from memory first, then from the spool in file order; while the spool
is non-empty every new message goes to the spool too, which keeps FIFO order.
A temporary spool (captures, replays, a daemon without ``--state-dir``) is
made at the first spill and removed at exit. A persistent spool (the daemon's
``--state-dir``, as ``STATE_DIR/outbox``) is reloaded by the next process
(:meth:`Outbox.load`), and :meth:`Outbox.persist` writes the memory part
there at exit, so nothing held is lost across a restart; it also writes the
smallest ack floor of the held messages to the file ``floor`` (a publish
may have been cut short at exit), which :meth:`Outbox.load` reads back.
Files are not fsynced: a process crash keeps them, a power loss may not.

Bound: ``max_bytes`` of payload plus headers in memory and spool together.
A message that does not fit is dropped and counted in ``dropped`` under
``outbox_full``; a spool write that fails drops it under ``spool_error``. Each
reason is logged once (at WARNING), then only counted.

``floor`` is the stream sequence the bus had seen acknowledged before the
message's first publish attempt (``-1``: never attempted, so it cannot be in
the stream); the bus uses the smallest floor of the held messages to find
which of them the stream stored although their acknowledgement was lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import struct
import tempfile
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("aaco.outbox")

NEVER_SENT = -1
FLOOR_FILE = "floor"
"""In the spool: the smallest ack floor of the held messages at :meth:`Outbox.persist`."""
_LEN = struct.Struct(">I")


@dataclass
class Held:
    """One held message: ``subject``, NATS ``headers`` (with ``Nats-Msg-Id``),
    ``payload`` bytes and the ack ``floor`` (see the module doc)."""

    subject: str
    headers: dict[str, str]
    payload: bytes
    floor: int = NEVER_SENT

    @property
    def msg_id(self) -> str:
        return self.headers.get("Nats-Msg-Id", "")

    @property
    def size(self) -> int:
        """Bytes counted against the cap: payload, subject and headers."""
        return (len(self.payload) + len(self.subject)
                + sum(len(k) + len(v) for k, v in self.headers.items()))


class Outbox:
    """A bounded FIFO of :class:`Held` messages, in memory then spilled to disk.

    ``spool_dir=None`` keeps everything in memory (up to ``max_bytes``);
    ``temp_spool=True`` spills to a temporary directory made at the first
    spill and removed by :meth:`cleanup`. Not thread-safe: used from the
    bus's event loop only.
    """

    def __init__(self, max_bytes: int, spool_dir: Path | None = None,
                 memory_bytes: int = 8 << 20, temp_spool: bool = False) -> None:
        if max_bytes < 0 or memory_bytes < 0:
            raise ValueError("outbox sizes must be >= 0")
        if temp_spool and spool_dir is not None:
            raise ValueError("give spool_dir or temp_spool, not both")
        self.max_bytes = max_bytes
        spills = spool_dir is not None or temp_spool
        self.memory_bytes = min(memory_bytes, max_bytes) if spills else max_bytes
        self.spool_dir = spool_dir
        self._temp = temp_spool
        self._mem: deque[tuple[int, Held]] = deque()
        self._mem_bytes = 0
        self._disk: deque[tuple[int, int]] = deque()  # (seq, size) in file order
        self._disk_bytes = 0
        self._seq = 0
        self.min_floor: int | None = None  # smallest floor of attempted held messages
        self.dropped: Counter[str] = Counter()
        self.spilled = 0  # messages written to the spool, ever
        self._logged: set[str] = set()

    def __len__(self) -> int:
        return len(self._mem) + len(self._disk)

    @property
    def held_bytes(self) -> int:
        return self._mem_bytes + self._disk_bytes

    def _drop(self, reason: str, n: int = 1, why: str = "") -> None:
        self.dropped[reason] += n
        if reason not in self._logged:
            self._logged.add(reason)
            log.warning("outbox: dropping messages (%s)%s; counted in "
                        "aaco_outbox_dropped_messages_total{reason=%r}, logged once",
                        reason, f": {why}" if why else "", reason)

    def drop_reasons(self) -> dict[str, int]:
        """``dropped`` with each reason prefixed ``outbox_`` (``outbox_full``
        stays as is), for the exporter-wide drop counters."""
        return {k if k.startswith("outbox_") else f"outbox_{k}": v
                for k, v in self.dropped.items() if v}

    def drop(self, reason: str, n: int = 1, why: str = "") -> None:
        """Count ``n`` messages lost for ``reason`` (logged once per reason)."""
        self._drop(reason, n, why)

    def put(self, m: Held) -> bool:
        """Append ``m``; ``False`` when it was dropped (cap or spool error)."""
        size = m.size
        if self.held_bytes + size > self.max_bytes:
            self._drop("outbox_full", why=f"a {size}-byte message does not fit beside "
                       f"{self.held_bytes} bytes held (cap {self.max_bytes})")
            return False
        self._seq += 1
        if not self._disk and self._mem_bytes + size <= self.memory_bytes:
            self._mem.append((self._seq, m))
            self._mem_bytes += size
        else:  # without a spool memory_bytes == max_bytes, so this spills
            try:
                self._write(self._seq, m)
            except OSError as e:
                self._drop("spool_error", why=f"{self.spool_dir}: {e}")
                return False
            self._disk.append((self._seq, size))
            self._disk_bytes += size
            self.spilled += 1
        if m.floor != NEVER_SENT:
            self.attempted(m.floor)
        return True

    def attempted(self, floor: int) -> None:
        """Note a publish attempt of a held message made at ack ``floor``."""
        self.min_floor = floor if self.min_floor is None else min(self.min_floor, floor)

    def peek(self) -> Held | None:
        """The oldest message (read from the spool when memory is empty).

        A spool file that cannot be read is dropped as ``spool_error``.
        """
        if self._mem:
            return self._mem[0][1]
        while self._disk:
            try:
                return self._read(self._disk[0][0])
            except (OSError, ValueError, KeyError, struct.error) as e:
                self._drop("spool_error", why=f"{self._path(self._disk[0][0])}: {e}")
                self.pop()
        return None

    def pop(self) -> None:
        """Remove the oldest message (after it was published or skipped)."""
        if self._mem:
            _, m = self._mem.popleft()
            self._mem_bytes -= m.size
        elif self._disk:
            seq, size = self._disk.popleft()
            self._disk_bytes -= size
            assert self.spool_dir is not None
            self._path(seq).unlink(missing_ok=True)
        if not self:
            self.min_floor = None

    def _path(self, seq: int) -> Path:
        assert self.spool_dir is not None
        return self.spool_dir / f"{seq:016d}.msg"

    def _write(self, seq: int, m: Held) -> None:
        if self.spool_dir is None:
            assert self._temp
            self.spool_dir = Path(tempfile.mkdtemp(prefix="aaco-outbox-"))
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        head = json.dumps({"subject": m.subject, "headers": m.headers,
                           "floor": m.floor}).encode()
        path = self._path(seq)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(_LEN.pack(len(head)))
            f.write(head)
            f.write(m.payload)
        os.replace(tmp, path)

    def _read(self, seq: int) -> Held:
        data = self._path(seq).read_bytes()
        (n,) = _LEN.unpack_from(data)
        head = json.loads(data[_LEN.size:_LEN.size + n])
        return Held(head["subject"], dict(head["headers"]), data[_LEN.size + n:],
                    int(head["floor"]))

    def load(self) -> int:
        """Adopt the spool files a previous process left; returns their count.

        Call before the first :meth:`put`. A file that cannot be read is
        counted as dropped under ``spool_error`` and removed.
        """
        if self.spool_dir is None or not self.spool_dir.is_dir():
            return 0
        for p in self.spool_dir.glob("*.tmp"):
            p.unlink(missing_ok=True)  # a write cut short by a crash
        n = 0
        for p in sorted(self.spool_dir.glob("*.msg")):
            try:
                seq = int(p.stem)
                m = self._read(seq)
            except (OSError, ValueError, KeyError, struct.error) as e:
                self._drop("spool_error", why=f"{p}: {e}")
                p.unlink(missing_ok=True)
                continue
            self._disk.append((seq, m.size))
            self._disk_bytes += m.size
            self._seq = max(self._seq, seq)
            if m.floor != NEVER_SENT:  # another process's floor: a sequence of the same stream
                self.attempted(m.floor)
            n += 1
        with contextlib.suppress(OSError, ValueError):
            self.attempted(int((self.spool_dir / FLOOR_FILE).read_text()))
        if not n:
            (self.spool_dir / FLOOR_FILE).unlink(missing_ok=True)
        return n

    def persist(self) -> int:
        """Write the memory part to the spool (at exit); returns messages written.

        Memory messages are older than spooled ones and keep their sequence
        numbers, so the files stay in order. Without a spool nothing is kept.
        """
        if self.spool_dir is None or self._temp:
            return 0
        n = 0
        while self._mem:
            seq, m = self._mem[0]
            try:
                self._write(seq, m)
            except OSError as e:
                self._drop("spool_error", len(self._mem), why=f"{self.spool_dir}: {e}")
                self._mem.clear()
                self._mem_bytes = 0
                break
            self._mem.popleft()
            self._mem_bytes -= m.size
            self._disk.appendleft((seq, m.size))  # not needed for order on disk
            self._disk_bytes += m.size
            n += 1
        # keep the in-memory index in file order
        self._disk = deque(sorted(self._disk))
        if self.min_floor is not None and self._disk:
            with contextlib.suppress(OSError):
                (self.spool_dir / FLOOR_FILE).write_text(str(self.min_floor))
        return n

    def cleanup(self) -> None:
        """Remove a temporary spool (what it held must have been taken or cleared)."""
        if self._temp and self.spool_dir is not None:
            shutil.rmtree(self.spool_dir, ignore_errors=True)
            self.spool_dir = None

    def clear(self, reason: str) -> int:
        """Drop everything held under ``reason``; returns the count."""
        n = len(self)
        if n:
            self._drop(reason, n, why=f"{n} messages, {self.held_bytes} bytes unpublished")
        while self:
            self.pop()
        return n

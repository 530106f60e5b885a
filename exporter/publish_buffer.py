"""Background samples held between publishes (``run --publish-interval``).

The always-on daemon's cost is paid per bus message (socket writes, event
loop wake-ups, two decodes per input), so :class:`PublishBuffer` lets the
pipeline sample at each collector's ``interval_s`` but publish background
samples once per publish interval:

* :data:`CONCAT_SIGNALS` (``gauge_sample``, ``sched_sample``): the samples of
  one collector are concatenated, in collect order, into one batch per
  publish. Every row keeps its own ``ts_ns``, so the data is the same, in
  fewer messages; consumers treat a batch as a sequence of samples
  (distinct ``ts_ns``), not as one sample.
* anything else passes at once: ``kernel_span``, ``iteration_span``,
  ``generate_span``, ``graph_info`` (event latency never waits here), and
  the ``process_info`` / ``k8s_attribution`` snapshots, whose batch is "the
  whole set of the host" (never concatenated; the analytics consumer does
  not read them, so holding them would save no flush, only delay a new
  process on ``/metrics``). So does every emit of a ``collect()`` call that
  returns any such signal (the ``attach`` collector's duty-cycle gauges
  travel with their kernel spans).

The first sample of each (collector, signal) passes at once, so ``/metrics``
shows gauges right after start. The buffer is bounded: a (collector, signal)
holding ``max_rows`` rows or ``max_batches`` batches is released at once
(counted in :attr:`PublishBuffer.early`), so memory stays bounded without
dropping anything. :meth:`PublishBuffer.drain` releases everything (each
publish tick, and at stop).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from collectors.base import Emit
from exporter import schema

CONCAT_SIGNALS = frozenset({"gauge_sample", "sched_sample"})
"""Periodic samples concatenated into one batch per publish (rows keep ``ts_ns``)."""


@dataclass
class _Held:
    batches: list[pa.RecordBatch] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass
class PublishBuffer:
    """Per (collector, signal) held samples; see the module doc.

    ``max_rows`` / ``max_batches`` bound one (collector, signal) buffer.
    ``held`` counts samples held (one per buffered emit), ``early`` the
    releases forced by the bound; both are cumulative.
    """

    max_rows: int = 65_536
    max_batches: int = 512
    held: Counter[str] = field(default_factory=Counter)
    early: Counter[str] = field(default_factory=Counter)
    _bufs: dict[tuple[str, str], _Held] = field(default_factory=dict)
    _seen: set[tuple[str, str]] = field(default_factory=set)

    def take(self, collector: str, emits: Iterable[Emit]) -> list[Emit]:
        """What to publish now of ``collector``'s ``collect()`` output; the rest
        is held. Raises :class:`~exporter.schema.SchemaError` for a background
        batch that does not fit its schema (nothing of the call is held then)."""
        emits = list(emits)
        if any(e.signal not in CONCAT_SIGNALS for e in emits):
            return emits  # an event-carrying call: nothing waits
        conformed = [(e, schema.conform(e.signal, e.batch)) for e in emits]
        now: list[Emit] = []
        for e, rb in conformed:
            slot = (collector, e.signal)
            if slot not in self._seen:  # the first sample: at once
                self._seen.add(slot)
                now.append(Emit(e.signal, rb, e.key))
                continue
            h = self._bufs.setdefault(slot, _Held())
            h.batches.append(rb)
            h.keys.append(e.key)
            h.rows += rb.num_rows
            self.held[e.signal] += 1
            if h.rows >= self.max_rows or len(h.batches) >= self.max_batches:
                self.early[e.signal] += 1
                now += self._release(slot)
        return now

    def drain(self) -> list[Emit]:
        """Every held sample, as emits to publish (oldest first per slot)."""
        out: list[Emit] = []
        for slot in list(self._bufs):
            out += self._release(slot)
        return out

    def __len__(self) -> int:
        """Samples held now."""
        return sum(len(h.batches) for h in self._bufs.values())

    def _release(self, slot: tuple[str, str]) -> list[Emit]:
        h = self._bufs.pop(slot, None)
        if h is None or not h.batches:
            return []
        signal = slot[1]
        if len(h.batches) == 1:
            return [Emit(signal, h.batches[0], h.keys[0])]
        # A deterministic id for the same samples: the first key and the count.
        return [Emit(signal, pa.Table.from_batches(h.batches), f"{h.keys[0]}+{len(h.keys)}")]

"""Columnar encoding of Perfetto TrackEvent slices as serialized ``TracePacket`` bytes.

:func:`encode` turns ``n`` slices given as numpy columns (:class:`SliceCols`)
into the bytes of ``2 n`` ``Trace.packet`` entries (field 1 of
``perfetto.protos.perfetto.trace.Trace``): a ``TYPE_SLICE_BEGIN`` and a
``TYPE_SLICE_END`` ``TrackEvent`` per slice, in the order
:func:`event_order` gives. Event names, categories, debug annotation names
and string values are interned ids (``name_iid``, ``category_iids``,
``DebugAnnotation.name_iid``/``string_value_iid``); the caller emits the
``InternedData`` earlier on the same sequence (:data:`SEQ_ID`). Begin packets
carry ``sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE``. Flows are
``flow_ids`` (field 47) on a slice that starts one and
``terminating_flow_ids`` (field 48) on the slice that ends it; 0 means none.

No Python object is made per slice (:mod:`exporter.sinks.pbwire`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from exporter.sinks import pbwire as w

SEQ_ID = 1
NEEDS_INCREMENTAL_STATE = 2  # TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
BEGIN, END = 1, 2  # TrackEvent.TYPE_SLICE_BEGIN / TYPE_SLICE_END

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass
class Annotation:
    """One debug annotation column: ``name_iid``; ``values`` int64 (``int``:
    ``int_value``; ``str``: ``string_value_iid``); absent where ``mask`` is False."""

    name_iid: int
    kind: str  # "int" or "str"
    values: I64
    mask: Mask


@dataclass
class SliceCols:
    """``n`` slices: times in ns, track uuids, interned name/category ids,
    nesting depth (tie-break at equal times), annotations, flow ids (0 = none)."""

    start: I64
    end: I64
    track: I64
    name_iid: I64
    cat_iid: I64
    depth: I64
    annotations: list[Annotation] = field(default_factory=list)
    flow_out: I64 | None = None
    flow_in: I64 | None = None

    @property
    def n(self) -> int:
        return int(self.start.shape[0])


def event_order(start: I64, end: I64, depth: I64) -> tuple[I64, npt.NDArray[np.intp]]:
    """``(ts, order)`` over the ``2 n`` events (begins then ends): sorted by time;
    at equal times ends (deepest first) precede begins (shallowest first);
    zero-length slices (``end <= start``) come last, their end at their start."""
    n = start.shape[0]
    zero = end <= start
    ts = np.concatenate([start, np.where(zero, start, end)])
    phase = np.concatenate([np.where(zero, 2, 1), np.where(zero, 2, 0)])
    tie = np.concatenate([depth * 2, np.where(zero, depth * 2, -depth)])
    sl = np.concatenate([np.arange(n), np.arange(n)])
    is_end = np.concatenate([np.zeros(n), np.ones(n)]).astype(np.int64)
    # one int64 key for (phase, tie, slice, is_end): tie in [-max depth, 2 max depth]
    d = int(depth.max()) if n else 0
    rest = ((phase * (3 * d + 1) + tie + d) * n + sl) * 2 + is_end
    return ts, np.lexsort((rest, ts))


def _annotation(a: Annotation) -> list[w.Part]:
    value_key = w.key(4 if a.kind == "int" else 17, w.VARINT)  # int_value / string_value_iid
    n = len(a.values)
    name = w.const(w.key(1, w.VARINT) + w.varint_bytes(a.name_iid), n)
    return w.message(4, [name, w.varint(a.values, prefix=value_key)], a.mask)


def encode(s: SliceCols) -> tuple[bytes, int]:
    """Serialized ``Trace.packet`` entries of ``s`` (2 per slice) and their count."""
    n = s.n
    if n == 0:
        return b"", 0
    ts, order = event_order(s.start, s.end, s.depth)
    V = w.VARINT
    track = w.varint(s.track, prefix=w.key(11, V))
    begin_ev = [w.const(w.key(9, V) + bytes([BEGIN]), n), track,
                w.varint(s.name_iid, prefix=w.key(10, V)),
                w.varint(s.cat_iid, prefix=w.key(3, V))]
    for a in s.annotations:
        begin_ev += _annotation(a)
    if s.flow_out is not None:
        begin_ev.append(w.fixed64(s.flow_out, s.flow_out > 0, w.key(47, w.I64_WIRE)))
    if s.flow_in is not None:
        begin_ev.append(w.fixed64(s.flow_in, s.flow_in > 0, w.key(48, w.I64_WIRE)))
    end_ev = [w.const(w.key(9, V) + bytes([END]), n), track]
    seq = w.key(10, V) + w.varint_bytes(SEQ_ID)
    flags = w.key(13, V) + bytes([NEEDS_INCREMENTAL_STATE])
    begin = [w.varint(ts[:n], prefix=w.key(8, V)), w.const(seq + flags, n),
             *w.message(11, begin_ev)]
    end = [w.varint(ts[n:], prefix=w.key(8, V)), w.const(seq, n), *w.message(11, end_ev)]
    return w.assemble([w.message(1, begin), w.message(1, end)], order), 2 * n

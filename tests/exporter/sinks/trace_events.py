"""Normalized TrackEvents of a ``.pftrace``, independent of how it is encoded.

:func:`events` reads a trace with perfetto's ``Trace`` proto and yields, in
file order, one tuple per ``TrackEvent``: ``(ts, type, track, name,
categories, annotations, flow_ids, terminating_flow_ids, counter value)``
where ``track`` is the track's descriptor path (``process``/``thread``
name, pid, tid, or track name, up through its parents) instead of its uuid,
interned names, categories, annotation names and string values are resolved
(so plain and interned encodings compare equal), annotations are a sorted
tuple of ``(name, value)`` and flow ids are ordinals in order of first use.
:func:`digest` hashes that sequence. Used to prove that a change to the
trace writer keeps the trace's meaning (tests/exporter/sinks/test_perfetto_held.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    Trace,
    TracePacket,
    TrackDescriptor,
)


def _track_path(uuid: int, tracks: dict[int, TrackDescriptor]) -> tuple[Any, ...]:
    out: list[Any] = []
    while uuid:
        t = tracks[uuid]
        if t.HasField("thread"):
            out.append(("thread", t.thread.pid, t.thread.tid, t.thread.thread_name))
        elif t.HasField("process"):
            out.append(("process", t.process.pid, t.process.process_name))
        else:
            out.append(("track", t.name, t.counter.unit_name if t.HasField("counter") else None))
        uuid = t.parent_uuid
    return tuple(out)


def _value(a: Any, strings: dict[int, str]) -> Any:
    kind = a.WhichOneof("value")
    if kind == "string_value_iid":
        return strings[a.string_value_iid]
    return getattr(a, kind) if kind else None


def events(path: Path, counter_ts: bool = True) -> Iterator[tuple[Any, ...]]:
    """Normalized events of ``path`` in file order (``counter_ts`` False:
    counter events without their timestamp)."""
    trace = Trace.FromString(Path(path).read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor
              for p in trace.packet if p.HasField("track_descriptor")}
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    ann: dict[int, str] = {}
    strings: dict[int, str] = {}
    flows: dict[int, int] = {}

    def flow(ids: Any) -> tuple[int, ...]:
        return tuple(flows.setdefault(f, len(flows) + 1) for f in ids)

    for p in trace.packet:
        if p.sequence_flags & TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            names, cats, ann, strings = {}, {}, {}, {}
        d = p.interned_data
        names |= {e.iid: e.name for e in d.event_names}
        cats |= {e.iid: e.name for e in d.event_categories}
        ann |= {e.iid: e.name for e in d.debug_annotation_names}
        strings |= {e.iid: e.str.decode() for e in d.debug_annotation_string_values}
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        counter = ev.double_counter_value if ev.HasField("double_counter_value") else None
        ts = p.timestamp if counter is None or counter_ts else None
        yield (ts, int(ev.type), _track_path(ev.track_uuid, tracks),
               names[ev.name_iid] if ev.name_iid else ev.name,
               tuple(ev.categories) + tuple(cats[c] for c in ev.category_iids),
               tuple(sorted((ann[a.name_iid] if a.name_iid else a.name, _value(a, strings))
                            for a in ev.debug_annotations)),
               flow(ev.flow_ids), flow(ev.terminating_flow_ids), counter)


def digest(path: Path, counter_ts: bool = True) -> tuple[int, str]:
    """``(number of events, sha256 prefix)`` of :func:`events` of ``path``."""
    h = hashlib.sha256()
    n = 0
    for e in events(path, counter_ts):
        h.update(json.dumps(e).encode())
        n += 1
    return n, h.hexdigest()[:16]

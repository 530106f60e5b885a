"""``aaco-exporter replay``: recorded GPU traces through the live pipeline.

Recorded rocprofv3 / rocprof / rocprof-compute / Kineto outputs are parsed
(:func:`collectors.rocprof.replay.load_paths`), published on the bus as
kernel spans, evaluated by the same analytics consumer as the daemon, and
written as the same session bundle ``capture`` writes. Rows that cannot be
used are counted by reason in ``rejects.json`` with file:line examples.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths
from exporter import schema
from exporter.bus import BusConfig
from exporter.capture import _env, derived_metrics
from exporter.pipeline import Pipeline
from exporter.sinks.bundle import BundleSink, finish, write_json
from stream_analytics.consumer import AnalyticsConsumer


async def replay(paths: Sequence[Path], out_parent: Path,
                 bus_cfg: BusConfig) -> tuple[Path, dict[str, Any], Rejects]:
    """Replay ``paths``; returns the session dir, derived metrics and rejects.

    Raises ``FileNotFoundError`` for a path that does not exist.
    """
    for p in paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
    host = socket.gethostname()
    session = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    out = out_parent / f"{session}_replay"
    pipe = Pipeline(host, bus_cfg, session=session)
    rejects = Rejects()
    try:
        bus = await pipe.open()
        sink = BundleSink(bus, session)
        await sink.start()
        consumer = AnalyticsConsumer(bus, durable=f"replay-{session}", window_s=None,
                                     checkpoint=False, session=schema.sanitize_token(session))
        await consumer.start()
        published = 0
        for emit in load_paths(list(paths), rejects):
            published += await bus.publish_table(emit.signal, emit.batch, emit.key)
            if published % 64 == 0:  # keep the backlog bounded
                await consumer.step(timeout=0.01)
                await sink.step(timeout=0.01)
        await consumer.drain()
        await sink.drain()
    finally:
        await pipe.close()
    out.mkdir(parents=True, exist_ok=True)
    counts = sink.write(out)
    results = sink.table("analytics_result").to_pylist()
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in results:
        last[(r["host"], r["pid"], r["model"])] = r
    keys = sorted(last.values(), key=lambda r: -int(r["kernel_spans_total"]))
    derived = derived_metrics(keys[0]) if keys else derived_metrics({})
    derived["kernel_count_total"] = sum(int(r["kernel_spans_total"]) for r in keys)
    derived["keys"] = [derived_metrics(r) | {"pid": r["pid"], "model": r["model"]} for r in keys]
    write_json(out / "metrics/derived_metrics.json", derived)
    derived["bottleneck"] = finish(out, sink, keys[0] if keys else None).get("class")
    write_json(out / "rejects.json", {"dropped": rejects.counts, "notes": rejects.notes,
                                      "examples": rejects.examples})
    write_json(out / "env.json", _env())
    write_json(out / "session.json", {
        "session_id": session, "host": host, "kind": "replay",
        "inputs": [str(p) for p in paths], "schema_version": schema.SCHEMA_VERSION,
        "nats": bus_cfg.url or "embedded", "rows": counts,
        "drops": dict(consumer.drops + consumer.engine.drops + sink.drops + pipe.drops),
    })
    return out, derived, rejects

"""``aaco-exporter replay``: recorded GPU traces through the live pipeline.

Recorded rocprofv3 / rocprof / rocprof-compute / Kineto outputs are parsed
(:func:`collectors.rocprof.replay.load_paths`), published on the bus as
kernel spans, evaluated by the same analytics consumer as the daemon, and
written as the same session bundle ``capture`` writes. Rows that cannot be
used are counted by reason in ``rejects.json`` with file:line examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import hip_api_table, load_paths
from exporter.bundle_dir import BundleDir
from exporter.bus import BusConfig
from exporter.roofline import write_roofline
from exporter.session import Session


class NothingToReplay(ValueError):
    """The inputs hold no kernel dispatch that could be read; the message names
    the files and why (the first rejects, e.g. an unsupported rocpd version)."""


async def replay(paths: Sequence[Path], out_parent: Path,
                 bus_cfg: BusConfig) -> tuple[Path, dict[str, Any], Rejects]:
    """Replay ``paths``; returns the session dir, derived metrics and rejects.

    Raises ``FileNotFoundError`` for a path that does not exist and
    :class:`NothingToReplay` when no kernel dispatch could be read from them
    (unreadable, unknown or empty input): no empty bundle is written.
    :class:`exporter.bundle_dir.BundleWriteError` when the bundle cannot be
    written (it is written atomically: nothing is left behind).
    """
    for p in paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
    rejects = Rejects()
    s = await Session.open("replay", bus_cfg)
    try:
        published = rows = 0
        for emit in load_paths(list(paths), rejects):
            rows += emit.batch.num_rows
            published += await s.bus.publish_table(emit.signal, emit.batch, emit.key)
            if published % 64 == 0:  # keep the backlog bounded
                await s.consumer.step(timeout=0.01)
                await s.sink.step(timeout=0.01)
        await s.drain()
    finally:
        await s.close()
    if rows == 0:
        why = "; ".join(e for ex in rejects.examples.values() for e in ex) or "no kernel dispatches"
        raise NothingToReplay(f"replay: nothing to replay in {', '.join(map(str, paths))}: {why}")
    with BundleDir() as bundle:
        out = bundle.create(out_parent / f"{s.id}_replay")
        derived = s.write_trace_bundle(out, {"kind": "replay",
                                             "inputs": [str(p) for p in paths]},
                                       rejects, hip_api_table([Path(p) for p in paths]))
        roof = write_roofline(out, [Path(p) for p in paths], rejects=rejects)
        if roof is not None:
            derived["roofline_bound"] = roof[0]["summary"]["bound"]
            if roof[1] is not None:
                derived["bottleneck"] = roof[1]["class"]
    assert bundle.final is not None
    return bundle.final, derived, rejects

"""``aaco-exporter replay``: recorded GPU traces through the live pipeline.

Recorded rocprofv3 / rocprof / rocprof-compute / Kineto outputs are parsed
(:func:`collectors.rocprof.replay.load_paths`), published on the bus as
kernel spans, evaluated by the same analytics consumer as the daemon, and
written as the same session bundle ``capture`` writes. Rows that cannot be
used are counted by reason in ``rejects.json`` with file:line examples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.rocprof.rejects import Rejects
from exporter.bundle_dir import BundleDir
from exporter.busconfig import BusConfig
from exporter.phases import Phases
from exporter.prefetch import prefetch

if TYPE_CHECKING:
    from collectors.base import Emit

HEAD_START = 40
"""Parsed batches (about 22,000 rocprofv3 rows each) the parser may run ahead
while the command imports the rest of itself and opens its bus (about 0.3 s
on two cores), against 4 once publishing starts
(:func:`exporter.prefetch.prefetch`). 16 left the parser waiting for most of
that time: a 2M-row replay's median wall time was 2.16 s with 16 and 2.07 s
with 40 (8 alternating pairs), the peak RSS the same (the peak comes at the
end); 64 was no faster."""


class NothingToReplay(ValueError):
    """The inputs hold no kernel dispatch that could be read; the message names
    the files and why (the first rejects, e.g. an unsupported rocpd version)."""


@dataclass
class Parsing:
    """Inputs being parsed (:func:`start_parsing`): the parser's ``emits`` as
    they come, the ``rejects`` it counts."""

    emits: Iterator[Emit]
    rejects: Rejects


def start_parsing(paths: Sequence[Path]) -> Parsing:
    """Start parsing ``paths`` now, in a worker thread
    (:func:`collectors.rocprof.replay.load_paths` run :data:`HEAD_START`
    batches ahead), before the bus and the analytics are imported: pyarrow's
    CSV reader releases the GIL, so the parse overlaps the rest of the
    command's start-up. Raises ``FileNotFoundError`` for a path that does not
    exist."""
    for p in paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
    from collectors.rocprof.replay import load_paths

    rejects = Rejects()
    return Parsing(prefetch(load_paths([Path(p) for p in paths], rejects),
                            head_start=HEAD_START), rejects)


async def replay(paths: Sequence[Path], out_parent: Path, bus_cfg: BusConfig,
                 progress: bool = False, parsing: Parsing | None = None,
                 ) -> tuple[Path, dict[str, Any], Rejects, Phases]:
    """Replay ``paths``; returns the session dir, derived metrics, rejects and
    the seconds per phase (also in ``session.json`` as ``timings_s``).

    ``progress`` shows a progress bar on stderr (when it is a terminal).
    ``parsing``: the inputs already being parsed (:func:`start_parsing` of
    ``paths``; the command line starts it before it imports the rest);
    default: started here. Memory does not grow with the kernel rows: they
    stream from the parser (a worker thread :data:`HEAD_START` batches ahead
    until publishing starts, then 4: :func:`exporter.prefetch.prefetch`;
    a large CSV's reader 2 blocks ahead of it in one more,
    :data:`collectors.rocprof.csvstream.READ_AHEAD`) to the bus, from the
    bus to ``profiler/kernels.parquet``, and from that file to
    ``trace.pftrace``.

    Raises ``FileNotFoundError`` for a path that does not exist and
    :class:`NothingToReplay` when no kernel dispatch could be read from them
    (unreadable, unknown or empty input): no empty bundle is written.
    :class:`exporter.bundle_dir.BundleWriteError` when the bundle cannot be
    written (it is written atomically: nothing is left behind).
    """
    parsing = parsing or start_parsing(paths)
    rejects = parsing.rejects
    phases = Phases()
    from collectors.rocprof.replay import hip_api_table
    from exporter.progress import bar
    from exporter.roofline import write_roofline
    from exporter.session import Session

    with bar(progress) as shown, BundleDir() as bundle:
        s = await Session.open("replay", bus_cfg, phases)
        s.progress = shown
        rows = 0
        try:
            # the parser runs ahead in a thread (pyarrow's CSV reader releases
            # the GIL), overlapping publishing, analytics and the bundle sink
            rows = await s.publish(parsing.emits)
            if rows:
                out = bundle.create(out_parent / f"{s.id}_replay")
                with phases.time("parse"):
                    hip_api = hip_api_table([Path(p) for p in paths])
                derived = await s.write_trace_bundle(
                    out, {"kind": "replay", "inputs": [str(p) for p in paths]}, rejects,
                    hip_api)
        finally:
            await s.close()
            s.sink.discard()
        if rows == 0:
            why = "; ".join(e for ex in rejects.examples.values() for e in ex) \
                or "no kernel dispatches"
            raise NothingToReplay(
                f"replay: nothing to replay in {', '.join(map(str, paths))}: {why}")
        roof = write_roofline(out, [Path(p) for p in paths], rejects=rejects)
        if roof is not None:
            derived["roofline_bound"] = roof[0]["summary"]["bound"]
            if roof[1] is not None:
                derived["bottleneck"] = roof[1]["class"]
    assert bundle.final is not None
    return bundle.final, derived, rejects, phases

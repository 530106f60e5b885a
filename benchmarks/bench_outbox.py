"""Cost of the bus outbox on the normal path (bus up), against the bare publish, in one run.

Input: kernel and iteration spans of a REAL ONNX Runtime profile of the
``magika`` model, tiled to ``--rows`` rows (``bench_pipeline.build_input``).
Each leg publishes the same tables, chunked into whole iterations
(``--chunk-iterations``: 175 is the ORT collector's ~1 s chunk; 1 makes many
small messages and so weighs the per-message cost), to an embedded
nats-server with JetStream file storage, and waits for every
acknowledgement:

* **outbox**: ``Bus.publish_table`` as the daemon and ``capture`` call it
  (the outbox check, then ``js.publish``; nothing is ever held here).
* **bare**: the code ``Bus.publish_table`` ran before the outbox existed:
  ``schema.encode_chunks`` and ``js.publish`` per message, nothing else.

The legs alternate for ``--rounds`` rounds on one server (a fresh stream per
leg), and the median of each is reported with the ratio outbox/bare of
messages per second and per CPU-second (this process plus nats-server).
It asserts that the outbox held nothing and that the stream stored every
message of every leg.

Usage::

    python benchmarks/bench_outbox.py [--rows 500000] [--chunk-iterations 175 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import Input, build_input
from benchcommon import Meter, nats_child

from exporter import schema
from exporter.bus import Bus, BusConfig

RESULTS = Path(__file__).resolve().parent / "results"


def chunks(inp: Input, per: int) -> list[tuple[str, pa.Table]]:
    """(signal, table) in publish order: kernel spans then iteration spans per chunk."""
    k_iter = inp.kernels.column("iteration").to_numpy()
    i_iter = inp.iterations.column("iteration").to_numpy()
    n = int(i_iter.max()) + 1
    edges = [*range(0, n, per), n]
    kc, ic = np.searchsorted(k_iter, edges), np.searchsorted(i_iter, edges)
    out = []
    for c in range(len(edges) - 1):
        out.append(("kernel_span", inp.kernels.slice(int(kc[c]), int(kc[c + 1] - kc[c]))))
        out.append(("iteration_span", inp.iterations.slice(int(ic[c]), int(ic[c + 1] - ic[c]))))
    return out


async def _leg(url: str, leg: str, work: list[tuple[str, pa.Table]],
               meter: Meter) -> dict[str, Any]:
    stream = f"B{uuid.uuid4().hex[:8]}"
    cfg = BusConfig(url=url, stream=stream)
    bus = await Bus.open(url, cfg, "bench")
    run = uuid.uuid4().hex[:8]
    try:
        msgs = 0
        meter.start()
        if leg == "outbox":
            for i, (sig, t) in enumerate(work):
                msgs += await bus.publish_table(sig, t, f"{run}:{i}")
        else:
            for i, (sig, t) in enumerate(work):
                for m in schema.encode_chunks(sig, t, host=bus.host, msg_id_prefix=f"{run}:{i}",
                                              max_bytes=cfg.max_payload_bytes):
                    await bus.js.publish(m.subject, m.payload, headers=m.headers)
                    msgs += 1
        meter.stop()
        assert len(bus.outbox) == 0 and not bus.outbox.dropped, "the outbox held messages"
        stored = int((await bus.js.stream_info(stream)).state.messages)
        assert stored == msgs, f"{leg}: stream has {stored} of {msgs} messages"
        await bus.js.delete_stream(stream)
    finally:
        await bus.close()
    return {"messages": msgs, "wall_s": meter.wall_s, "cpu_s": meter.cpu_s,
            "others_cores": meter.others_cores}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=500_000, help="kernel spans per leg")
    ap.add_argument("--chunk-iterations", type=int, nargs="+", default=[175, 1],
                    help="iterations per published chunk (one case each)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    ap.add_argument("--profile-iterations", type=int, default=20)
    ap.add_argument("--json", type=Path, default=RESULTS / "bench_outbox.json")
    a = ap.parse_args(argv)
    inp = build_input(a.rows, a.profile_iterations)
    print(f"input: {inp.profile_kernels} kernel spans of {inp.profile_iterations} real magika "
          f"runs, tiled to {inp.kernels.num_rows:,} rows")
    report: dict[str, Any] = {"rows": inp.kernels.num_rows, "cases": []}
    print(f"{'chunk':>6} {'leg':<7} {'msgs':>7} {'msgs/s':>10} {'msgs/cpu-s':>11} {'others':>7}")
    with nats_child() as (_srv, url, meter):
        for per in a.chunk_iterations:
            work = chunks(inp, per)
            runs: dict[str, list[dict[str, Any]]] = {"bare": [], "outbox": []}
            for _ in range(a.rounds):
                for leg in ("bare", "outbox"):
                    runs[leg].append(asyncio.run(_leg(url, leg, work, meter)))
            med = {}
            for leg, rs in runs.items():
                n = rs[0]["messages"]
                rate = statistics.median(n / r["wall_s"] for r in rs)
                per_cpu = statistics.median(n / r["cpu_s"] for r in rs)
                others = statistics.median(r["others_cores"] for r in rs)
                med[leg] = {"messages": n, "msgs_per_s": rate, "msgs_per_cpu_s": per_cpu,
                            "others_cores": others, "runs": rs}
                print(f"{per:>6} {leg:<7} {n:>7,} {rate:>10,.0f} {per_cpu:>11,.0f} {others:>7.2f}")
            ratio = med["outbox"]["msgs_per_s"] / med["bare"]["msgs_per_s"]
            ratio_cpu = med["outbox"]["msgs_per_cpu_s"] / med["bare"]["msgs_per_cpu_s"]
            print(f"{per:>6} ratio outbox/bare: {ratio:.3f} msgs/s, {ratio_cpu:.3f} msgs/cpu-s")
            report["cases"].append({"chunk_iterations": per, **med, "ratio_msgs_per_s": ratio,
                                    "ratio_msgs_per_cpu_s": ratio_cpu})
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

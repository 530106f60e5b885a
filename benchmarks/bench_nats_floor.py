"""The embedded nats-server's own CPU floor, with no traffic at all.

The daemon's goal (``bench_daemon_cost.py``) counts nats-server's CPU in its
1 % of a core. This measures how much of that the server takes before the
daemon sends anything: the nats-server ``run`` starts (``EmbeddedNats``,
``GOMAXPROCS`` as the daemon sets it), one client connected (nats-py, as the
daemon connects), CPU (user + system from ``/proc/PID/stat``) of the server
over ``--seconds`` after 3 s of settling, as % of one core, in three legs:

* ``no-stream``: JetStream on, no stream;
* ``stream``: plus the bus's stream (``exporter.bus.Bus.ensure_stream``: file
  storage over ``aaco.v1.>``) holding one message;
* ``stream+consumer``: plus one durable pull consumer on it, as the analytics
  consumer has.

Each leg is a fresh server. The resolution is one clock tick (10 ms) per
``--seconds``: 0.017 % at 60 s.

Usage::

    python benchmarks/bench_nats_floor.py [--seconds 60] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import pid_cpu_s

from exporter.bus import Bus, connect
from exporter.busconfig import BusConfig
from exporter.daemon import EMBEDDED_NATS_GOMAXPROCS
from exporter.natsserver import EmbeddedNats

LEGS = ("no-stream", "stream", "stream+consumer")


async def _leg(leg: str, seconds: float, settle_s: float = 3.0) -> float:
    """nats-server's CPU (% of one core) over ``seconds`` in the setup ``leg``,
    measured from ``settle_s`` after the setup."""
    with EmbeddedNats(go_max_procs=EMBEDDED_NATS_GOMAXPROCS) as srv:
        assert srv.proc is not None
        cfg = BusConfig()
        if leg == "no-stream":
            nc = await connect(srv.url, cfg)
        else:
            bus = await Bus.open(srv.url, cfg, host="bench")
            nc = bus.nc
            await bus.js.publish("aaco.v1.bench.bench", b"one")
            if leg == "stream+consumer":
                await bus.js.pull_subscribe("aaco.v1.>", durable="bench", stream=cfg.stream)
        try:
            await asyncio.sleep(settle_s)
            c0 = pid_cpu_s(srv.proc.pid)
            await asyncio.sleep(seconds)
            return 100.0 * (pid_cpu_s(srv.proc.pid) - c0) / seconds
        finally:
            await nc.close()


def measure(seconds: float, settle_s: float = 3.0) -> dict[str, float]:
    """CPU % of one core per leg of :data:`LEGS`."""
    return {leg: asyncio.run(_leg(leg, seconds, settle_s)) for leg in LEGS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    res = measure(args.seconds)
    print(f"nats-server CPU with no traffic, % of one core over {args.seconds:.0f} s "
          f"(GOMAXPROCS={EMBEDDED_NATS_GOMAXPROCS}, one client connected):")
    for leg, pct in res.items():
        print(f"  {leg:16s} {pct:6.3f} %")
    if args.json:
        args.json.write_text(json.dumps({"seconds": args.seconds, "cpu_pct": res}, indent=2))


if __name__ == "__main__":
    main()

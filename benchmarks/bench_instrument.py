"""Overhead of ``exporter.instrument`` on ONNX Runtime inference latency.

One process, one ``magika`` session (CPU execution provider, generated
inputs as the ORT collector makes them), a real embedded nats-server with
the ``AACO`` stream. ``--blocks`` blocks of ``--runs`` calls alternate
plain / instrumented (the class is patched and unpatched between blocks; the
publisher keeps publishing to the bus meanwhile), so the noise of a shared
machine falls on both sides alike. Each call is timed with
``time.perf_counter_ns`` around ``session.run``.

Reported: p50 latency of each side (µs), the p50 overhead in % and in µs per
run, and the **hot-path cost alone**: the wrapper around a no-op callable
(``wrap(lambda self, *a: None, ...)`` called ``--hot`` times, minus the bare
no-op call), in µs per call. Goals: overhead <= 2 % of p50 and <= 10 µs per
run. Also printed: spans published and dropped (all calls must be accounted).

Usage::

    python benchmarks/bench_instrument.py [--blocks 10] [--runs 200] [--hot 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# benchmarks/ is not a package; benchcommon also puts the repository root on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchcommon  # noqa: F401
import onnxruntime as ort

from collectors.ort import resolve_model
from collectors.ort.inputs import make_inputs
from exporter.bus import Bus, BusConfig
from exporter.instrument.patch import patch_class, unpatch_class
from exporter.natsserver import EmbeddedNats


def _timed(fn: Callable[[], Any], n: int) -> list[int]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out


def hot_path_us(n: int) -> float:
    """µs per call the wrapper adds around a no-op (best of 5 rounds)."""
    from exporter.instrument.patch import wrap
    from exporter.instrument.recorder import Recorder

    class Noop:
        def __init__(self) -> None:
            self._model_path = "/m/noop.onnx"

        def get_providers(self) -> list[str]:
            return ["CPUExecutionProvider"]

        def run(self, output_names: Any, input_feed: Any) -> None:
            return None

    rec = Recorder(cap=n + 1)
    bare = Noop()
    wrapped_cls = type("Wrapped", (Noop,), {})
    wrapped_cls.run = wrap(Noop.run, rec, iobinding=False)  # type: ignore[method-assign]
    inst = wrapped_cls()
    feed = {"x": __import__("numpy").zeros((1, 4))}
    best = float("inf")
    for _ in range(5):
        rec.queue.clear()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            inst.run(None, feed)
        t1 = time.perf_counter_ns()
        for _ in range(n):
            bare.run(None, feed)
        t2 = time.perf_counter_ns()
        best = min(best, ((t1 - t0) - (t2 - t1)) / n / 1000)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=10, help="blocks per side")
    ap.add_argument("--runs", type=int, default=200, help="runs per block")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--hot", type=int, default=200_000, help="no-op calls for the hot path")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    import exporter.instrument as instr

    with EmbeddedNats() as srv:
        async def mkstream() -> None:
            bus = await Bus.open(srv.url, BusConfig(url=srv.url), "bench")
            await bus.close()

        asyncio.run(mkstream())
        os.environ["AACO_NATS_URL"] = srv.url
        model = resolve_model("magika")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        feed = make_inputs(sess.get_inputs())

        def call() -> None:
            sess.run(None, feed)

        _timed(call, args.warmup)
        instr.instrument_onnxruntime()  # starts the publisher; blocks below toggle the patch
        rec = instr._recorder()
        plain: list[int] = []
        inst: list[int] = []
        for _ in range(args.blocks):
            unpatch_class(ort.InferenceSession)
            plain += _timed(call, args.runs)
            patch_class(ort.InferenceSession, rec)
            inst += _timed(call, args.runs)
        st = instr.shutdown(5.0)
    hot = hot_path_us(args.hot)
    p50_a = statistics.median(plain) / 1000
    p50_b = statistics.median(inst) / 1000
    res = {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.python_version()}, "
                   f"onnxruntime {ort.__version__}",
        "blocks": args.blocks, "runs_per_block": args.runs,
        "p50_plain_us": round(p50_a, 2), "p50_instrumented_us": round(p50_b, 2),
        "p50_overhead_us": round(p50_b - p50_a, 2),
        "p50_overhead_pct": round(100 * (p50_b - p50_a) / p50_a, 2),
        "hot_path_us": round(hot, 3),
        "published": st.published, "recorded": st.recorded, "dropped": st.dropped,
    }
    if args.json:
        print(json.dumps(res))
        return
    print(f"machine: {res['machine']}")
    print(f"{args.blocks} blocks x {args.runs} runs per side, interleaved; magika, CPU EP, "
          f"1 intra-op thread; publishing to an embedded nats-server")
    print(f"p50 plain          {p50_a:10.1f} us")
    print(f"p50 instrumented   {p50_b:10.1f} us")
    print(f"p50 overhead       {p50_b - p50_a:10.2f} us  ({res['p50_overhead_pct']:+.2f} %)")
    print(f"hot path (no-op)   {hot:10.3f} us per call")
    print(f"spans: recorded {st.recorded}, published {st.published}, dropped {st.dropped}")


if __name__ == "__main__":
    main()

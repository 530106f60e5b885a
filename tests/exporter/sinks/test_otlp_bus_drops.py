"""OTLP on the bus never loses spans silently: a span tree that fits no bus
message even alone is dropped and counted by reason, span for span."""

from __future__ import annotations

import asyncio
from pathlib import Path

from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.sinks.otlp_bus import DROP_SPAN_TOO_LARGE, OtlpBusBridge
from tests.support import load_path as _load

HERE = Path(__file__).parent
data = _load("aaco_sink_testdata", HERE / "testdata" / "sinkdata.py")


def _run(url: str, max_payload: int) -> tuple[int, int, dict[str, int]]:
    ks, its = data.magika_tables(runs=2)

    async def go() -> tuple[int, int, dict[str, int]]:
        bus = await Bus.open(url, BusConfig(max_payload_bytes=max_payload), "n")
        try:
            bridge = OtlpBusBridge()
            bridge.ingest("kernel_span", "n", ks)
            bridge.ingest("iteration_span", "n", its)
            sent = await bridge.flush(bus, final=True)
            return sent, ks.num_rows + its.num_rows, dict(bridge.take_drops())
        finally:
            await bus.close()

    return asyncio.run(go())


def test_span_trees_over_the_payload_limit_are_counted_as_drops(
        nats_server: EmbeddedNats) -> None:
    """With a 200-byte message limit no span fits: nothing is published and
    every kernel and iteration span is counted under otlp_span_too_large."""
    sent, spans, drops = _run(nats_server.url, 200)
    assert sent == 0
    assert drops == {DROP_SPAN_TOO_LARGE: spans}


def test_span_trees_within_the_limit_drop_nothing(nats_server: EmbeddedNats) -> None:
    """With the default limit the same spans are published, no drop counted."""
    sent, _, drops = _run(nats_server.url, BusConfig().max_payload_bytes)
    assert sent >= 1
    assert drops.get(DROP_SPAN_TOO_LARGE, 0) == 0

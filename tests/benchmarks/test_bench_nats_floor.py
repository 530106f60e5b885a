"""``benchmarks/bench_nats_floor.py``: each leg starts its own real
nats-server and reports its CPU; the legs with the bus's stream really hold
it (and the durable consumer). Presence and counts are asserted, never
durations."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import nats
import pytest

from tests.support import ROOT, load_path


async def _streams(url: str) -> tuple[int, int]:
    """(messages, consumers) over every stream of the server at ``url``."""
    nc = await nats.connect(url)
    try:
        infos = await nc.jetstream().streams_info()
        return (sum(i.state.messages for i in infos),
                sum(i.state.consumer_count or 0 for i in infos))
    finally:
        await nc.close()


def test_every_leg_reports_the_cpu_of_its_own_server_set_up_as_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 1 s each, the three legs report a CPU share in [0, 100) % of three
    distinct nats-server processes; seen just before each stops, the first
    has no stream, the second the bus's stream with its one message, the
    third that and one durable consumer."""
    bench = load_path("bench_nats_floor", ROOT / "benchmarks" / "bench_nats_floor.py")
    seen: list[tuple[int, int, int]] = []

    class Watched(bench.EmbeddedNats):  # type: ignore[misc, name-defined]
        def stop(self) -> None:
            if self.proc is not None and self.proc.poll() is None:
                with ThreadPoolExecutor(1) as ex:  # the leg's own loop is running
                    msgs, consumers = ex.submit(asyncio.run, _streams(self.url)).result()
                seen.append((self.proc.pid, msgs, consumers))
            super().stop()

    monkeypatch.setattr(bench, "EmbeddedNats", Watched)
    res = bench.measure(1.0, settle_s=0.2)
    assert list(res) == list(bench.LEGS)
    assert all(0.0 <= v < 100.0 for v in res.values()), res
    assert len({pid for pid, _, _ in seen}) == 3
    assert [(m, c) for _, m, c in seen] == [(0, 0), (1, 0), (1, 1)]

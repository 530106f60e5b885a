"""Checkpoints are data, never code: a pickle payload in the KV bucket is
refused without being executed, a corrupt, foreign or newer checkpoint is
counted and the worker starts fresh, and river detectors round-trip as plain
numbers (Page-Hinkley exactly, ADWIN by replay)."""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import pickle
import random
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from exporter.bus import Bus, BusConfig
from exporter.natsserver import EmbeddedNats
from stream_analytics.consumer import CHECKPOINT_FORMAT, KV_BUCKET, AnalyticsConsumer
from stream_analytics.drift import ADWIN, ADWIN_REPLAY_CAP, PageHinkley, detector_from_dict


class _Evil:
    """Unpickling this creates ``marker``: proof that a payload was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (pathlib.Path.touch, (self.marker,))


async def _start_with(url: str, blob: bytes) -> tuple[AnalyticsConsumer, int]:
    """Store ``blob`` as durable ``victim``'s checkpoint, start a consumer on it,
    feed it one iteration span and return it with its folded-iteration count."""
    bus = await Bus.open(url, BusConfig(url=url), "h")
    try:
        from nats.js.api import KeyValueConfig

        kv = await bus.js.create_key_value(KeyValueConfig(bucket=KV_BUCKET, history=1))
        await kv.put("victim", blob)
        c = AnalyticsConsumer(bus, durable="victim", window_s=None)
        await c.start()  # must not raise
        await bus.publish_table("iteration_span", pa.table({
            "start_ns": [0], "end_ns": [10], "duration_ns": [10], "source": ["x"],
            "model": ["m"], "pid": [1], "iteration": [0], "kernel_count": [0]}), "k")
        await c.drain()
        its = sum(st.iterations_total for st in c.engine.keys.values())
        return c, its
    finally:
        await bus.close()


@pytest.mark.parametrize("shape", ["raw-pickle", "pickle-in-detector-state"])
def test_a_pickle_payload_is_refused_without_being_executed(tmp_path: Path, shape: str) -> None:
    """Neither a pickled blob nor pickle bytes inside a (formerly valid) detector
    state run: the marker file is never created, the checkpoint is counted as
    bad_checkpoint, and the worker runs from a fresh state."""
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Evil(marker))
    if shape == "raw-pickle":
        blob = zlib.compress(evil)
    else:  # the v2 layout, when river detectors travelled as base64 pickle
        det = {"kind": "page_hinkley", "params": {"grace_period": 5},
               "state": {"river": base64.b64encode(evil).decode(), "drift": False,
                         "n_detections": 0, "std": {}}}
        blob = zlib.compress(json.dumps({
            "engine": {"window_s": None, "bucket_ns": 10**9, "nodes": [], "sched": [],
                       "drops": {}, "keys": []},
            "verdicts": {"drift": {"h": {"streams": [{"detectors": [det]}]}}},
            "last_seq": 5}).encode())
    with EmbeddedNats(tmp_path / "nats") as srv:
        c, its = asyncio.run(_start_with(srv.url, blob))
    assert not marker.exists(), "the payload was executed"
    assert c.drops["bad_checkpoint"] == 1
    assert its == 1 and c.last_seq >= 1  # fresh state, and it keeps working


@pytest.mark.parametrize(("state", "why"), [
    ({"format": "someone-else", "version": 1}, "foreign"),
    ({"format": CHECKPOINT_FORMAT, "version": 99}, "newer"),
    ([1, 2, 3], "not an object"),
])
def test_foreign_newer_or_malformed_checkpoints_start_fresh(tmp_path: Path, state: object,
                                                            why: str) -> None:
    with EmbeddedNats(tmp_path / "nats") as srv:
        c, its = asyncio.run(_start_with(srv.url, zlib.compress(json.dumps(state).encode())))
    assert c.drops["bad_checkpoint"] == 1, why
    assert its == 1


def test_a_zlib_bomb_is_refused(tmp_path: Path) -> None:
    """A checkpoint inflating past the cap is refused, not inflated."""
    bomb = zlib.compress(b"[" + b" " * (300 << 20) + b"]", 9)
    with EmbeddedNats(tmp_path / "nats") as srv:
        c, _ = asyncio.run(_start_with(srv.url, bomb))
    assert c.drops["bad_checkpoint"] == 1


@pytest.mark.parametrize("cls", [PageHinkley, ADWIN])
def test_river_detectors_round_trip_as_numbers_and_answer_the_same(cls: type) -> None:
    """A reloaded detector fires on exactly the same later samples (within the
    ADWIN replay cap), and its checkpoint is plain JSON."""
    rng = random.Random(11)
    a = cls(grace_period=20)
    for _ in range(min(400, ADWIN_REPLAY_CAP)):
        a.update(rng.gauss(10, 1))
    text = json.dumps(a.to_dict())
    assert "river" not in json.loads(text)["state"]
    b = detector_from_dict(json.loads(text))
    later = [rng.gauss(10, 1) for _ in range(150)] + [rng.gauss(13, 1) for _ in range(150)]
    fired_a, fired_b = [], []
    for x in later:
        a.update(x)
        b.update(x)
        fired_a.append(a.drift_detected)
        fired_b.append(b.drift_detected)
    assert fired_a == fired_b and any(fired_a)


def test_non_numbers_in_a_detector_state_are_refused() -> None:
    d = PageHinkley(grace_period=5).to_dict()
    d["state"]["mean"] = "__import__('os')"
    with pytest.raises(ValueError, match="not a number"):
        detector_from_dict(d)

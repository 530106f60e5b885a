"""Checkpoints the parser fuzzer found (benchmarks/fuzz_parsers.py) that passed
``checkpoint.decode`` and then broke ``Analytics.from_dict`` /
``OnlineVerdicts.from_dict`` with TypeError/ValueError/OverflowError (the consumer's
start-up net caught them, as 'a loader bug'). Now the schema names the field, or
``checkpoint.restore`` refuses the value its loader rejects, always as
CheckpointError."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from stream_analytics import checkpoint
from stream_analytics.drift import DriftMonitor
from stream_analytics.engine import Analytics
from stream_analytics.verdicts import OnlineVerdicts


def _state() -> dict[str, Any]:
    m = DriftMonitor()
    for i in range(100):
        m.update("latency", "resnet", 10.0 + (i % 7) * 0.1 + (i > 80), ts_ns=i, host="h")
    ov = OnlineVerdicts()
    ov.drift = m
    st = {"engine": Analytics().to_dict(), "last_seq": 7, "processed": [7], "generation": 1,
          "drops": {}, "verdicts": ov.to_dict()}
    out: dict[str, Any] = json.loads(json.dumps(st))
    return out


def _raw(st: dict[str, Any]) -> bytes:
    return zlib.compress(json.dumps({"format": checkpoint.FORMAT,
                                     "version": checkpoint.VERSION, **st}).encode())


def _slot_det(st: dict[str, Any], kind: str) -> dict[str, Any]:
    d: dict[str, Any] = st["verdicts"]["drift"]["slots"][0]["detectors"][kind]
    return d


def _join(**kw: Any) -> list[Any]:
    j = {"s": [1], "e": [2], "it": [0], "mc": [0], "models": ["m"], "watermark": 0, **kw}
    return ["h", 1, j]


EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("joins not a list", lambda s: s["engine"].update(joins=7), "engine.joins"),
    ("join not a triple", lambda s: s["engine"].update(joins=[5]), "engine.joins[0]"),
    ("join ids not ints", lambda s: s["engine"].update(joins=[_join(s=["x"])]),
     "engine.joins[0][2].s"),
    ("join mc past models", lambda s: s["engine"].update(joins=[_join(mc=[3])]),
     "engine.joins[0][2].mc"),
    ("max_held infinite", lambda s: s["engine"].update(max_held=float("inf")),
     "engine.max_held"),
    ("max_spans text", lambda s: s["engine"].update(max_spans="abc"), "engine.max_spans"),
    ("grace text", lambda s: s["engine"].update(attribution_grace_s=""),
     "engine.attribution_grace_s"),
    ("attach float", lambda s: s["engine"].update(attach=[["h", 1, 1.5]]), "engine.attach[0]"),
    ("grace null", lambda s: s["engine"].update(attribution_grace_s=None),
     "engine.attribution_grace_s"),
    ("grace 1e308 s", lambda s: s["engine"].update(attribution_grace_s=1e308),
     "engine.attribution_grace_s"),
    ("window 1e300 s", lambda s: s["engine"].update(window_s=1e300), "engine.window_s"),
    ("forget 1e300 s", lambda s: s["engine"].update(forget_s=1e300), "engine.forget_s"),
    ("unknown param", lambda s: _slot_det(s, "adwin")["params"].update({"c,ip": 4.0}),
     "params.c,ip"),
    ("param of wrong type", lambda s: _slot_det(s, "adwin")["params"].update(
        min_window_length="5"), "params.min_window_length"),
    ("unhashable kind", lambda s: s["verdicts"]["drift"]["detectors"]["ewma"].update(
        kind={"k": 1}), "detectors.ewma.kind"),
    ("unhashable stream", lambda s: s["verdicts"]["drift"]["slots"][0].update(stream=[1]),
     "slots[0].stream"),
]


@pytest.mark.parametrize(("edit", "field"), [(e, f) for _, e, f in EDITS],
                         ids=[n for n, _, _ in EDITS])
def test_wrong_shape_is_refused_by_the_schema_naming_the_field(
        edit: Callable[[dict[str, Any]], None], field: str) -> None:
    """decode (so restore too) raises CheckpointError naming the field."""
    st = _state()
    edit(st)
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(field)):
        checkpoint.decode(_raw(st))
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.restore(_raw(st))


@pytest.mark.parametrize(("kind", "change"), [
    ("page_hinkley", {"min_instances": 0}),
    ("ewma", {"lambda_": 7.0}),
    ("cusum", {"h": -1.0}),
])
def test_parameter_out_of_range_is_refused_by_restore(kind: str, change: dict[str, Any]) -> None:
    """A parameter of the right type but out of its detector's range (the constructor's
    ValueError) is a CheckpointError from restore naming verdicts.drift."""
    st = _state()
    _slot_det(st, kind)["params"].update(change)
    with pytest.raises(checkpoint.CheckpointError,
                       match=r"verdicts\.drift: refused by its loader"):
        checkpoint.restore(_raw(st))


def test_adwin_buckets_breaking_their_invariants_are_refused_by_restore() -> None:
    """ADWIN bucket summaries of the right types but the wrong lengths (adwin_buckets'
    ValueError) are a CheckpointError from restore."""
    st = _state()
    adwin = _slot_det(st, "adwin")["state"]["adwin"]
    if adwin["encoding"] != "buckets":
        pytest.skip("ADWIN state saved as replay inputs in this environment")
    adwin["buckets"][0]["totals"] += [1.0] * 7
    adwin["buckets"][0]["variances"] += [0.0] * 7
    with pytest.raises(checkpoint.CheckpointError, match="refused by its loader"):
        checkpoint.restore(_raw(st))


def test_restore_of_a_good_checkpoint_gives_engine_and_verdicts() -> None:
    """The unedited state restores, with the drift monitor it was saved with."""
    st = _state()
    back, eng, ov = checkpoint.restore(_raw(st))
    assert back["last_seq"] == 7
    assert isinstance(eng, Analytics)
    assert ov.drift.to_dict() == st["verdicts"]["drift"]

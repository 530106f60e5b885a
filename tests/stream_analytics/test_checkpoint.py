"""Analytics checkpoints are explicit, versioned, schema-checked JSON: detector
state survives a round trip exactly, and anything corrupt, foreign, too new or
pickled is refused with CheckpointError without being executed."""

from __future__ import annotations

import base64
import json
import pickle
import random
import zlib
from pathlib import Path
from typing import Any

import pytest
from river.drift import ADWIN as RiverADWIN
from river.drift import PageHinkley as RiverPH

from stream_analytics import adwin_buckets, checkpoint
from stream_analytics.drift import ADWIN, DriftMonitor, PageHinkley, detector_from_dict
from stream_analytics.engine import Analytics
from stream_analytics.river_state import PH_ATTRS
from stream_analytics.verdicts import OnlineVerdicts


class TouchOnUnpickle:
    """Unpickling this creates ``path``: the marker of code execution."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def _series(n: int, seed: int, level: float = 10.0) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(level, 1.0) for _ in range(n)]


def _roundtrip(det: Any) -> Any:
    return detector_from_dict(json.loads(json.dumps(det.to_dict())))


def _answers(det: Any, xs: list[float]) -> list[bool]:
    out = []
    for x in xs:
        det.update(x)
        out.append(det.drift_detected)
    return out


def test_page_hinkley_attributes_are_the_ones_serialised() -> None:
    """river's PageHinkley holds exactly the attributes river_state knows, and its
    running mean only n and _mean (a river upgrade adding state fails here)."""
    ph = RiverPH()
    ph.update(1.0)
    assert set(vars(ph)) == PH_ATTRS
    assert set(vars(ph._x_mean)) == {"n", "_mean"}


def test_page_hinkley_reloaded_answers_like_the_original() -> None:
    """A Page-Hinkley checkpointed mid-stream answers identically on further data."""
    det = PageHinkley(grace_period=20, threshold=10.0)
    _answers(det, _series(150, 1))
    twin = _roundtrip(det)
    assert "river" not in det.to_dict()["state"]
    later = _series(100, 2) + _series(100, 3, level=13.0)
    a, b = _answers(det, later), _answers(twin, later)
    assert a == b and any(a)
    assert det.to_dict() == twin.to_dict()


@pytest.fixture
def replay_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a river whose ADWIN helper layout is unknown: state by replay."""
    monkeypatch.setattr(adwin_buckets, "supported", lambda: False)


@pytest.mark.parametrize("mode", ["buckets", "replay"])
def test_adwin_reloaded_answers_like_the_original(mode: str, request: pytest.FixtureRequest,
                                                  ) -> None:
    """An ADWIN reloaded from its bucket state (or rebuilt from replayed inputs)
    has the same window (width, total, variance) and the same detections on
    further data."""
    if mode == "replay":
        request.getfixturevalue("replay_mode")
    det = ADWIN(grace_period=20, delta=0.002)
    _answers(det, _series(700, 4))
    twin = _roundtrip(det)
    for attr in ("width", "total", "variance", "n_detections"):
        assert getattr(twin.detector, attr) == getattr(det.detector, attr), attr
    assert det.to_dict()["state"]["adwin"]["encoding"] == \
        ("buckets" if mode == "buckets" else "f64le")
    later = _series(300, 5) + _series(300, 6, level=12.0) + _series(300, 7)
    a, b = _answers(det, later), _answers(twin, later)
    assert a == b and sum(a) >= 1
    assert det.to_dict() == twin.to_dict()


def test_adwin_bucket_state_is_exact_and_small_after_a_long_history() -> None:
    """After 20,000 samples the bucket state is a few KiB of JSON and the
    reloaded helper is byte-identical to the original."""
    det = ADWIN(grace_period=20, delta=1e-9)
    _answers(det, _series(20_000, 11))
    d = det.to_dict()
    assert len(json.dumps(d)) < 4096
    twin = _roundtrip(det)
    assert twin.detector._helper.__getstate__() == det.detector._helper.__getstate__()
    assert twin.detector.width == det.detector.width == 20_000 - 20


def test_adwin_bucket_layout_is_the_installed_rivers() -> None:
    """Pins the bincode layout: river's helper bytes decode and re-encode
    byte-identically (a river upgrade that changes it fails here)."""
    assert adwin_buckets.supported()
    det = RiverADWIN(delta=0.002, clock=32, max_buckets=5, min_window_length=5, grace_period=10)
    for x in _series(3000, 12):
        det.update(x)
    raw = det._helper.__getstate__()
    params = {"delta": 0.002, "clock": 32, "max_buckets": 5, "min_window_length": 5,
              "grace_period": 10}
    assert adwin_buckets.from_json(adwin_buckets.to_json(raw), params) == raw


def _bucket_state() -> tuple[dict[str, Any], dict[str, Any]]:
    det = RiverADWIN(delta=0.002, clock=32, max_buckets=5, min_window_length=5, grace_period=10)
    for x in _series(500, 13):
        det.update(x)
    params = {"delta": 0.002, "clock": 32, "max_buckets": 5, "min_window_length": 5,
              "grace_period": 10}
    return adwin_buckets.to_json(det._helper.__getstate__()), params


@pytest.mark.parametrize("breakage", [
    "bucket_over_max", "width_mismatch", "empty_last", "no_buckets", "too_many", "nan_total",
    "negative_tick", "ragged",
])  # fmt: skip
def test_adwin_bucket_invariants_are_checked(breakage: str) -> None:
    """Bucket states the Rust code could not index (or that lie about the
    window) are refused with ValueError before __setstate__ sees them."""
    s, params = _bucket_state()
    b = s["buckets"]
    if breakage == "bucket_over_max":
        b[0]["totals"] += [1.0] * 6
        b[0]["variances"] += [0.0] * 6
    elif breakage == "width_mismatch":
        s["width"] += 1
    elif breakage == "empty_last":
        b.append({"totals": [], "variances": []})
    elif breakage == "no_buckets":
        s["buckets"] = []
    elif breakage == "too_many":
        s["buckets"] = b * 61
    elif breakage == "nan_total":
        s["total"] = float("nan")
    elif breakage == "negative_tick":
        s["tick"] = -1
    elif breakage == "ragged":
        b[0]["variances"] = b[0]["variances"][:-1]
    with pytest.raises(ValueError):
        adwin_buckets.from_json(s, params)


@pytest.mark.usefixtures("replay_mode")
def test_adwin_replay_ring_is_bounded() -> None:
    """Past max_replay inputs only the last max_replay travel; the rebuilt
    window holds those (seen counts all of them)."""
    det = ADWIN(grace_period=10, delta=1e-9, max_replay=50)
    _answers(det, _series(300, 8))
    st = det.to_dict()["state"]["adwin"]
    assert st["seen"] == 290  # after the 10-sample grace period
    assert len(base64.b64decode(st["inputs"])) == 50 * 8
    twin = _roundtrip(det)
    assert twin.detector.width == 50 and det.detector.width == 290


def test_river_adwin_helper_exposes_only_getters_and_bincode() -> None:
    """Why a bincode codec (or replay): river's Rust ADWIN helper has only
    getters and bincode __getstate__ bytes, no bucket accessors."""
    public = {n for n in dir(RiverADWIN()._helper) if not n.startswith("_")}
    assert public == {"get_n_detections", "get_total", "get_variance", "get_width", "update",
                      "variance_in_window"}


def _state(monitor: DriftMonitor | None = None) -> dict[str, Any]:
    ov = OnlineVerdicts()
    if monitor is not None:
        ov.drift = monitor
    return {"engine": Analytics().to_dict(), "last_seq": 7, "processed": [5, 6, 7],
            "generation": 3, "drops": {"bad_values": 1}, "verdicts": ov.to_dict()}


def _fed_monitor() -> DriftMonitor:
    m = DriftMonitor()
    for i, x in enumerate(_series(80, 9)):
        m.update("latency", "resnet", x, ts_ns=i, host="h")
    return m


def test_checkpoint_envelope_round_trip() -> None:
    """encode -> decode gives the state back, with format and version checked."""
    st = _state(_fed_monitor())
    raw = checkpoint.encode(st)
    doc = json.loads(zlib.decompress(raw))
    assert (doc["format"], doc["version"]) == ("aaco-analytics-checkpoint", 3)
    back = checkpoint.decode(raw)
    assert back == json.loads(json.dumps(st))
    m = OnlineVerdicts.from_dict(back["verdicts"]).drift
    assert m.to_dict() == _fed_monitor().to_dict()


def _legacy(st: dict[str, Any], drift_version: int = 2) -> bytes:
    st = json.loads(json.dumps(st))
    st["verdicts"]["drift"]["version"] = drift_version
    return zlib.compress(json.dumps(st).encode())


def test_legacy_v2_checkpoint_without_pickle_loads() -> None:
    """A pre-envelope checkpoint (drift monitor v2, EWMA/CUSUM only) still loads."""
    m = DriftMonitor(detectors={"e": {"kind": "ewma", "params": {}},
                                "c": {"kind": "cusum", "params": {}}})
    for i, x in enumerate(_series(60, 10)):
        m.update("kar", "m", x, ts_ns=i, host="h")
    back = checkpoint.decode(_legacy(_state(m)))
    assert back["last_seq"] == 7
    assert OnlineVerdicts.from_dict(back["verdicts"]).drift.to_dict()["slots"] == \
        m.to_dict()["slots"]


def test_legacy_v1_checkpoint_loads() -> None:
    """A drift monitor v1 checkpoint (no host fields) passes the schema."""
    st = _state()
    st["verdicts"]["drift"]["family_prev"] = [["m", "gemm", 3, 300]]
    st["verdicts"]["drift"]["latency_prev"] = [["m", 3, 300]]
    st["verdicts"]["drift"]["latency_last_end"] = {"m": 9}
    back = checkpoint.decode(_legacy(st, drift_version=1))
    assert DriftMonitor.from_dict(back["verdicts"]["drift"])._latency_prev == {("", "m"): (3, 300)}


def pickled_legacy_checkpoint(marker: Path) -> bytes:
    """A v2 checkpoint whose Page-Hinkley state is a pickle that touches ``marker``
    (what the previous release would have unpickled)."""
    st = json.loads(json.dumps(_state(_fed_monitor())))
    det = st["verdicts"]["drift"]["slots"][0]["detectors"]["page_hinkley"]["state"]
    del det["page_hinkley"]
    det["river"] = base64.b64encode(pickle.dumps(TouchOnUnpickle(marker))).decode()
    return _legacy(st)


def test_pickle_payload_is_live(tmp_path: Path) -> None:
    """Control: unpickling the test payload really creates the marker."""
    marker = tmp_path / "control"
    pickle.loads(pickle.dumps(TouchOnUnpickle(marker)))  # the control: it runs
    assert marker.exists()


def test_pickled_detector_state_is_refused_unexecuted(tmp_path: Path) -> None:
    """A checkpoint holding a pickled detector is refused; the pickle never runs."""
    marker = tmp_path / "pwned"
    with pytest.raises(checkpoint.CheckpointError, match="pickled"):
        checkpoint.decode(pickled_legacy_checkpoint(marker))
    assert not marker.exists()


def test_raw_pickle_checkpoint_is_refused_unexecuted(tmp_path: Path) -> None:
    """A KV value that is a pickle (plain or zlib'd) is not JSON: refused, not run."""
    marker = tmp_path / "pwned"
    payload = pickle.dumps(TouchOnUnpickle(marker))
    for raw in (payload, zlib.compress(payload)):
        with pytest.raises(checkpoint.CheckpointError):
            checkpoint.decode(raw)
    assert not marker.exists()


def _enveloped(**change: Any) -> bytes:
    doc = {"format": checkpoint.FORMAT, "version": checkpoint.VERSION, **_state(_fed_monitor())}
    doc.update(change)
    return zlib.compress(json.dumps(doc).encode())


@pytest.mark.parametrize(("raw", "match"), [
    (b"", "empty"),
    (b"\x00garbage", "not zlib"),
    (zlib.compress(b"{not json"), "not JSON"),
    (zlib.compress(b"[1, 2]"), "not a JSON object"),
    (zlib.compress(b"0" * 10) [:-3], "truncated"),
    (_enveloped(format="someone-else"), "foreign"),
    (_enveloped(version=4), "newer"),
    (_enveloped(version="3"), "bad version"),
    (_enveloped(last_seq="7"), "last_seq"),
    (_enveloped(last_seq=-1), "last_seq"),
    (_enveloped(generation=True), "generation"),
    (_enveloped(processed=[1, 0]), "processed"),
    (_enveloped(drops={"x": -2}), "drops"),
    (_enveloped(extra=1), "unknown fields"),
    (_enveloped(engine={"window_s": 30}), "engine"),
])  # fmt: skip
def test_corrupt_foreign_or_new_checkpoints_are_refused(raw: bytes, match: str) -> None:
    """Each bad checkpoint raises CheckpointError naming what is wrong."""
    with pytest.raises(checkpoint.CheckpointError, match=match):
        checkpoint.decode(raw)


def _mutated_detector(path: str, value: Any) -> bytes:
    doc = json.loads(zlib.decompress(_enveloped()))
    det = doc["verdicts"]["drift"]["slots"][0]["detectors"]
    *keys, last = path.split(".")
    node = det
    for k in keys:
        node = node[k]
    node[last] = value
    return zlib.compress(json.dumps(doc).encode())


@pytest.mark.parametrize(("path", "value"), [
    ("cusum.state.s_hi", -1.0),
    ("cusum.state.s_hi", float("nan")),
    ("ewma.state.t", 1.5),
    ("ewma.kind", "os.system"),
    ("page_hinkley.state.page_hinkley.x_mean", float("inf")),
    ("adwin.state.adwin.encoding", "pickle"),
    ("adwin.state.adwin.tick", -1),
    ("adwin.state.adwin.buckets", [{"totals": ["1"], "variances": [0.0]}]),
    ("adwin.state.std.scale", -1.0),
])  # fmt: skip
def test_detector_fields_are_type_and_range_checked(path: str, value: Any) -> None:
    """A detector field of the wrong type or range refuses the checkpoint."""
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.decode(_mutated_detector(path, value))


@pytest.mark.parametrize(("kind", "params"), [
    ("adwin", {"clock": 0}), ("adwin", {"max_buckets": 10**9}), ("adwin", {"delta": 0.0}),
    ("page_hinkley", {"alpha": 0.0}), ("page_hinkley", {"mode": "sideways"}),
])  # fmt: skip
def test_detector_params_out_of_range_are_refused(kind: str, params: dict[str, Any]) -> None:
    """Hyperparameters river would panic or blow up on (clock 0, a billion
    bucket slots) are refused when a checkpoint's detector is built."""
    doc = json.loads(zlib.decompress(_enveloped()))
    det = doc["verdicts"]["drift"]["slots"][0]["detectors"][kind]
    det["params"].update(params)
    st = checkpoint.decode(zlib.compress(json.dumps(doc).encode()))
    with pytest.raises(ValueError, match="need"):
        OnlineVerdicts.from_dict(st["verdicts"])


@pytest.mark.usefixtures("replay_mode")
def test_adwin_inputs_out_of_range_are_refused() -> None:
    """ADWIN replay samples must be finite clipped z-scores (checked at load)."""
    bad = base64.b64encode(b"\x00" * 6 + b"\xf0\x7f").decode()  # one float64: +inf
    raw = _mutated_detector("adwin.state.adwin.inputs", bad)
    st = checkpoint.decode(raw)
    with pytest.raises(ValueError, match="adwin"):
        OnlineVerdicts.from_dict(st["verdicts"])


def test_zlib_bomb_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inflating stops at MAX_JSON_BYTES."""
    monkeypatch.setattr(checkpoint, "MAX_JSON_BYTES", 1000)
    with pytest.raises(checkpoint.CheckpointError, match="larger"):
        checkpoint.decode(zlib.compress(b" " * 5000))

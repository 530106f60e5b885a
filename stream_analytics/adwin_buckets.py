"""ADWIN's exact bucket state as JSON, via the Rust helper's bincode layout.

river >= 0.26 keeps ADWIN's window in ``river._river_rust.drift.AdaptiveWindowing``
(``src/drift/adwin.rs``), a serde struct whose only state access is
``__getstate__``/``__setstate__`` with bincode 1 bytes (fixed-width little
endian, ``u64`` lengths) of ::

    delta f64, clock i32, max_buckets u64, min_window_length f64,
    grace_period f64, total f64, variance f64, width f64, total_width f64,
    n_buckets i32, max_n_buckets i32, tick i32, n_detections i32,
    bucket_list: u64 n, then n x (max_size u64, current_idx u64,
                                  totals: u64 len + f64s, variances: u64 len + f64s)

followed by the constructor arguments (``delta f64, clock i32, max_buckets
u64, min_window_length i32, grace_period i32``) that the Python binding
appends for its ``__getnewargs__``.

Bucket ``i`` summarises ``current_idx`` groups of ``2**i`` samples; slots past
``current_idx`` are always zero. :func:`to_json` turns the bytes into named
fields (only the used slots, a few dozen numbers); :func:`from_json` checks
every field's type, range and the invariants the Rust code indexes by
(bucket count, ``current_idx <= max_buckets``, width = sum of
``current_idx * 2**i``, a non-empty last bucket) and rebuilds the bytes from
those numbers and the detector's own hyperparameters, so ``__setstate__``
only ever sees bytes this module wrote. :func:`supported` probes once
whether the installed river has this layout (round trip byte-identical);
when it does not, :mod:`stream_analytics.river_state` falls back to replay.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Mapping
from typing import Any

_HEAD = struct.Struct("<diQddddddiiiiQ")
_BUCKET = struct.Struct("<QQ")
_LEN = struct.Struct("<Q")
_ARGS = struct.Struct("<diQii")
MAX_BUCKET_LISTS = 60
"""Bucket lists kept (list ``i`` holds groups of ``2**i`` samples): 2**60 samples."""
_I32 = 2**31 - 1
COUNTERS = ("n_buckets", "max_n_buckets", "tick", "n_detections")
FLOATS = ("total", "variance", "width", "total_width")


def _f64s(raw: bytes, pos: int) -> tuple[list[float], int]:
    (n,) = _LEN.unpack_from(raw, pos)
    pos += _LEN.size
    if n > 64:
        raise ValueError("adwin bincode: bucket longer than 64 slots")
    vals = list(struct.unpack_from(f"<{n}d", raw, pos))
    return vals, pos + 8 * n


def to_json(raw: bytes) -> dict[str, Any]:
    """Named fields of a helper's ``__getstate__`` bytes (see the module doc).

    ``ValueError``/``struct.error`` when ``raw`` is not that layout.
    """
    h = _HEAD.unpack_from(raw, 0)
    pos = _HEAD.size
    if h[13] > MAX_BUCKET_LISTS:
        raise ValueError("adwin bincode: too many bucket lists")
    buckets = []
    for _ in range(h[13]):
        _size, cur = _BUCKET.unpack_from(raw, pos)
        totals, pos = _f64s(raw, pos + _BUCKET.size)
        variances, pos = _f64s(raw, pos)
        buckets.append({"totals": totals[:cur], "variances": variances[:cur]})
    args = _ARGS.unpack_from(raw, pos)
    if pos + _ARGS.size != len(raw) or args != (h[0], h[1], h[2], int(h[3]), int(h[4])):
        raise ValueError("adwin bincode: unexpected trailer")
    return {"encoding": "buckets", **dict(zip(FLOATS, h[5:9], strict=True)),
            **dict(zip(COUNTERS, h[9:13], strict=True)), "buckets": buckets}


def _float_list(v: Any, what: str) -> list[float]:
    if not isinstance(v, list) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in v):
        raise ValueError(f"adwin: {what} must be a list of finite numbers")
    return [float(x) for x in v]


def from_json(s: Mapping[str, Any], params: Mapping[str, Any]) -> bytes:
    """``__setstate__`` bytes for :func:`to_json` output ``s`` and the helper's
    hyperparameters ``params`` (``delta``, ``clock``, ``max_buckets``,
    ``min_window_length``, ``grace_period``). ``ValueError`` on any field of
    the wrong type or range, or a bucket structure the Rust code could not
    index (see the module doc)."""
    mb = int(params["max_buckets"])
    vals: dict[str, Any] = {k: s.get(k) for k in FLOATS}
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
               for v in vals.values()):
        raise ValueError("adwin: total/variance/width/total_width must be finite numbers")
    cnt: dict[str, Any] = {k: s.get(k) for k in COUNTERS}
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _I32
               for v in cnt.values()):
        raise ValueError("adwin: counters must be int32 >= 0")
    buckets = s.get("buckets")
    if not isinstance(buckets, list) or not 1 <= len(buckets) <= MAX_BUCKET_LISTS:
        raise ValueError(f"adwin: need 1..{MAX_BUCKET_LISTS} bucket lists")
    width = 0
    out = bytearray()
    for i, b in enumerate(buckets):
        if not isinstance(b, dict) or set(b) != {"totals", "variances"}:
            raise ValueError(f"adwin: bucket {i} must have totals and variances")
        t, v = _float_list(b["totals"], "totals"), _float_list(b["variances"], "variances")
        if len(t) != len(v) or len(t) > mb or (i and i == len(buckets) - 1 and not t):
            raise ValueError(f"adwin: bucket {i} has a bad length")
        width += len(t) << i
        pad = [0.0] * (mb + 1 - len(t))
        out += _BUCKET.pack(mb, len(t))
        out += _LEN.pack(mb + 1) + struct.pack(f"<{mb + 1}d", *t, *pad)
        out += _LEN.pack(mb + 1) + struct.pack(f"<{mb + 1}d", *v, *pad)
    if float(vals["width"]) != float(width) or float(vals["total_width"]) < 0:
        raise ValueError("adwin: width does not match the buckets")
    head = _HEAD.pack(float(params["delta"]), int(params["clock"]), mb,
                      float(params["min_window_length"]), float(params["grace_period"]),
                      *(float(vals[k]) for k in FLOATS), *(int(cnt[k]) for k in COUNTERS),
                      len(buckets))  # fmt: skip
    args = _ARGS.pack(float(params["delta"]), int(params["clock"]), mb,
                      int(params["min_window_length"]), int(params["grace_period"]))
    return head + bytes(out) + args


@functools.cache
def supported() -> bool:
    """True when the installed river's ADWIN helper has this bincode layout:
    its bytes decode, re-encode identically, and load into an equal helper."""
    try:
        from stream_analytics.river_import import detector_class

        _ADWIN = detector_class("ADWIN")
        params = {"delta": 0.002, "clock": 4, "max_buckets": 2, "min_window_length": 5,
                  "grace_period": 10}
        det: Any = _ADWIN(**params)
        for i in range(203):
            det.update(float(i % 7) + (50.0 if i > 150 else 0.0))
        raw = det._helper.__getstate__()
        if from_json(to_json(raw), params) != raw:
            return False
        twin: Any = _ADWIN(**params)
        twin._helper.__setstate__(raw)
        return bool(twin._helper.__getstate__() == raw)
    except Exception:
        return False

"""Hand-written schema check of an analytics checkpoint (no runtime deps).

:func:`check_state` walks a decoded checkpoint (``json.loads`` output) and
raises :class:`SchemaError` naming the first field whose type or range is
wrong, before any of it reaches ``Analytics.from_dict`` /
``OnlineVerdicts.from_dict``. The shapes checked are those of
:meth:`stream_analytics.engine.Analytics.to_dict`,
:meth:`stream_analytics.drift.DriftMonitor.to_dict` (versions 1-3) and the
consumer's own fields (``last_seq``, ``processed``, ``generation``,
``drops``). Integers are JSON integers (never booleans) within int64;
floats are finite unless a field says otherwise. The engine section may
carry keys this version does not know (they are ignored by its loader);
every other section is closed.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

I64 = 2**63 - 1


class SchemaError(ValueError):
    """A checkpoint field of the wrong type or range; ``str`` names its path."""


def _fail(path: str, what: str) -> SchemaError:
    return SchemaError(f"{path}: {what}")


def int_(v: Any, path: str, lo: int = -I64, hi: int = I64) -> int:
    """``v`` as an int in ``[lo, hi]``."""
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise _fail(path, f"expected an integer in [{lo}, {hi}], got {v!r:.40}")
    return v


MAX_SECONDS = 1e9
"""Largest duration in seconds a checkpoint may hold (the engine turns seconds into
int64 nanoseconds, twice a window at most: 2e18 < 2**63)."""


def num(v: Any, path: str, *, inf: bool = False, lo: float = -math.inf,
        hi: float = math.inf) -> float:
    """``v`` (int or float) as a number in [``lo``, ``hi``]; never NaN; +-inf only if
    ``inf``."""
    if not isinstance(v, int | float) or isinstance(v, bool) or math.isnan(v):
        raise _fail(path, f"expected a number, got {v!r:.40}")
    if (not inf and math.isinf(v)) or v < lo or v > hi:
        raise _fail(path, f"out of range: {v!r}")
    return float(v)


def str_(v: Any, path: str, max_len: int = 4096) -> str:
    if not isinstance(v, str) or len(v) > max_len:
        raise _fail(path, f"expected a string of at most {max_len} characters")
    return v


def bool_(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise _fail(path, "expected true or false")
    return v


def list_(v: Any, path: str, length: int | None = None) -> list[Any]:
    if not isinstance(v, list) or (length is not None and len(v) != length):
        raise _fail(path, "expected a list" + (f" of {length}" if length is not None else ""))
    return v


def dict_(v: Any, path: str, required: tuple[str, ...] = (), optional: tuple[str, ...] = (),
          closed: bool = True) -> dict[str, Any]:
    """``v`` as a JSON object with ``required`` keys (and only those plus
    ``optional`` when ``closed``)."""
    if not isinstance(v, dict):
        raise _fail(path, "expected an object")
    missing = [k for k in required if k not in v]
    if missing:
        raise _fail(path, f"missing {missing}")
    if closed:
        extra = sorted(set(v) - set(required) - set(optional))
        if extra:
            raise _fail(path, f"unknown fields {extra[:5]}")
    return v


def counts(v: Any, path: str) -> None:
    """An object of name -> count >= 0."""
    for k, n in dict_(v, path, closed=False).items():
        int_(n, f"{path}.{str_(k, path)}", 0)


def opt(check: Callable[..., Any], v: Any, path: str, **kw: Any) -> None:
    """``check(v)`` unless ``v`` is null."""
    if v is not None:
        check(v, path, **kw)


# -- engine ----------------------------------------------------------------
REC_LEN = 12  # stream_analytics.engine.Rec.as_list (11 before its ``source``)


def _rec(r: Any, path: str) -> None:
    r = list_(r, path)
    if len(r) not in (REC_LEN - 1, REC_LEN):
        raise _fail(path, f"expected a list of {REC_LEN - 1} or {REC_LEN}")
    for i, v in enumerate(r):
        if i == 9:
            bool_(v, f"{path}[9]")
        elif i == 11:
            str_(v, f"{path}[11]", 32)
        else:
            int_(v, f"{path}[{i}]")


def check_engine(e: Any, path: str = "engine") -> None:
    """``Analytics.to_dict`` output."""
    e = dict_(e, path, ("window_s", "bucket_ns", "nodes", "sched", "drops", "keys"),
              closed=False)
    opt(num, e["window_s"], f"{path}.window_s", lo=0.0, hi=MAX_SECONDS)
    int_(e["bucket_ns"], f"{path}.bucket_ns", 1)
    opt(num, e.get("forget_s"), f"{path}.forget_s", lo=0.0, hi=MAX_SECONDS)
    if "sched_keys" in e:
        bool_(e["sched_keys"], f"{path}.sched_keys")
    counts(e["drops"], f"{path}.drops")
    for i, n in enumerate(list_(e["nodes"], f"{path}.nodes")):
        p = f"{path}.nodes[{i}]"
        n = list_(n, p, 3)
        str_(n[0], p), str_(n[1], p), int_(n[2], p, 0)
    for i, s in enumerate(list_(e["sched"], f"{path}.sched")):
        p = f"{path}.sched[{i}]"
        s = list_(s, p, 3)
        str_(s[0], p), int_(s[1], p)
        for j, x in enumerate(list_(s[2], p)):
            for v in list_(x, f"{p}[{j}]", 4):
                int_(v, f"{p}[{j}]")
    for i, c in enumerate(list_(e.get("comms", []), f"{path}.comms")):
        p = f"{path}.comms[{i}]"
        c = list_(c, p, 3)
        str_(c[0], p), int_(c[1], p), str_(c[2], p)
    for i, k in enumerate(list_(e["keys"], f"{path}.keys")):
        _key_state(k, f"{path}.keys[{i}]")
    if "attribution_grace_s" in e:
        num(e["attribution_grace_s"], f"{path}.attribution_grace_s", lo=0.0, hi=MAX_SECONDS)
    for name in ("max_held", "max_spans"):
        if name in e:
            int_(e[name], f"{path}.{name}", 0)
    for i, a in enumerate(list_(e.get("attach", []), f"{path}.attach")):
        p = f"{path}.attach[{i}]"
        a = list_(a, p, 3)
        str_(a[0], p), int_(a[1], p)
        for j, w in enumerate(list_(a[2], p)):
            for v in list_(w, f"{p}[{j}]", 2):
                int_(v, f"{p}[{j}]")
    for i, jn in enumerate(list_(e.get("joins", []), f"{path}.joins")):
        p = f"{path}.joins[{i}]"
        jn = list_(jn, p, 3)
        str_(jn[0], p), int_(jn[1], p)
        _join(jn[2], f"{p}[2]")


def _join(d: Any, path: str) -> None:
    """``PidJoin.to_dict``: equal-length int lists s/e/it/mc (mc indexes ``models``)."""
    d = dict_(d, path, ("s", "e", "it", "mc", "models", "watermark"), ("held",))
    models = [str_(m, f"{path}.models") for m in list_(d["models"], f"{path}.models")]
    cols = [list_(d[k], f"{path}.{k}") for k in ("s", "e", "it", "mc")]
    if len({len(c) for c in cols}) > 1:
        raise _fail(path, "s, e, it and mc differ in length")
    for k, c in zip(("s", "e", "it"), cols, strict=False):
        for x in c:
            int_(x, f"{path}.{k}")
    for x in cols[3]:
        int_(x, f"{path}.mc", 0, max(0, len(models) - 1))
    int_(d["watermark"], f"{path}.watermark")
    opt(str_, d.get("held"), f"{path}.held", max_len=1 << 30)


def _key_state(k: Any, path: str) -> None:
    k = dict_(k, path, ("key", "node_count", "pending", "window", "kernel_spans_total",
                        "iterations_total", "family_spans", "family_ns"),
              ("iteration_ns_total", "seen_ns"), closed=False)
    key = list_(k["key"], f"{path}.key", 3)
    str_(key[0], f"{path}.key"), int_(key[1], f"{path}.key"), str_(key[2], f"{path}.key")
    opt(int_, k["node_count"], f"{path}.node_count", lo=0)
    for name in ("pending", "window"):
        for j, r in enumerate(list_(k[name], f"{path}.{name}")):
            _rec(r, f"{path}.{name}[{j}]")
    for name in ("kernel_spans_total", "iterations_total", "iteration_ns_total", "seen_ns"):
        if name in k:
            int_(k[name], f"{path}.{name}", 0)
    counts(k["family_spans"], f"{path}.family_spans")
    counts(k["family_ns"], f"{path}.family_ns")


# -- drift -----------------------------------------------------------------
def _param_types(kind: str) -> dict[str, type]:
    """Parameter name -> type of its default, from the detector class's ``__init__``."""
    from stream_analytics.drift import DETECTOR_TYPES

    sig = inspect.signature(DETECTOR_TYPES[kind].__init__)
    return {p.name: type(p.default) for p in sig.parameters.values() if p.name != "self"}


def _params(v: Any, path: str, kind: str) -> None:
    """A detector's parameters: names of its class's ``__init__``, each of the type of
    its default (ranges are the constructor's: ValueError, see ``checkpoint.restore``)."""
    types = _param_types(kind)
    for k, x in dict_(v, path, closed=False).items():
        str_(k, path, 64)
        want = types.get(k)
        if want is None:
            raise _fail(f"{path}.{k:.40}", f"not a parameter of {kind} "
                                           f"({', '.join(sorted(types))})")
        if want is str:
            str_(x, f"{path}.{k}", 64)
        elif want is bool:
            bool_(x, f"{path}.{k}")
        elif want is int:
            int_(x, f"{path}.{k}")
        else:
            num(x, f"{path}.{k}")


def _detector(d: Any, path: str, kinds: frozenset[str]) -> None:
    d = dict_(d, path, ("kind", "params", "state"))
    if not isinstance(d["kind"], str) or d["kind"] not in kinds:
        raise _fail(f"{path}.kind", f"unknown detector kind {d['kind']!r:.40}")
    _params(d["params"], f"{path}.params", d["kind"])
    s = dict_(d["state"], f"{path}.state", ("std", "drift", "n_detections"), closed=False)
    std = dict_(s["std"], f"{path}.state.std", ("buf", "center", "scale"))
    for j, x in enumerate(list_(std["buf"], f"{path}.state.std.buf")):
        num(x, f"{path}.state.std.buf[{j}]")
    opt(num, std["center"], f"{path}.state.std.center")
    opt(num, std["scale"], f"{path}.state.std.scale", lo=0.0)
    bool_(s["drift"], f"{path}.state.drift")
    int_(s["n_detections"], f"{path}.state.n_detections", 0)
    own = {k: v for k, v in s.items() if k not in ("std", "drift", "n_detections")}
    _OWN[d["kind"]](own, f"{path}.state")


def _ewma(s: dict[str, Any], path: str) -> None:
    dict_(s, path, ("statistic", "t"))
    num(s["statistic"], f"{path}.statistic"), int_(s["t"], f"{path}.t", 0)


def _cusum(s: dict[str, Any], path: str) -> None:
    dict_(s, path, ("s_hi", "s_lo"))
    num(s["s_hi"], f"{path}.s_hi", lo=0.0), num(s["s_lo"], f"{path}.s_lo", lo=0.0)


def _river(key: str, check: Callable[[Any, str], None]) -> Callable[[dict[str, Any], str], None]:
    def f(s: dict[str, Any], path: str) -> None:
        if "river" in s:  # v1/v2: a base64 pickle; refused, never decoded
            raise _fail(f"{path}.river", "pickled detector state refused (not decoded)")
        dict_(s, path, (key,))
        check(s[key], f"{path}.{key}")
    return f


def _ph(v: Any, path: str) -> None:
    v = dict_(v, path, ("x_mean_n", "x_mean", "sum_increase", "sum_decrease", "min_increase",
                        "max_decrease", "drift_detected"))
    num(v["x_mean_n"], f"{path}.x_mean_n", lo=0.0), num(v["x_mean"], f"{path}.x_mean")
    for k in ("sum_increase", "sum_decrease", "min_increase", "max_decrease"):
        num(v[k], f"{path}.{k}", inf=True)
    bool_(v["drift_detected"], f"{path}.drift_detected")


def _adwin(v: Any, path: str) -> None:
    """Bucket summaries (``encoding: buckets``) or replay inputs (``f64le``)."""
    enc = dict_(v, path, ("encoding",), closed=False)["encoding"]
    if enc == "f64le":
        v = dict_(v, path, ("encoding", "inputs", "seen"))
        str_(v["inputs"], f"{path}.inputs", 1 << 24)
        int_(v["seen"], f"{path}.seen", 0)
        return
    if enc != "buckets":
        raise _fail(f"{path}.encoding", "expected 'buckets' or 'f64le'")
    floats, counters = ("total", "variance", "width", "total_width"), (
        "n_buckets", "max_n_buckets", "tick", "n_detections")
    v = dict_(v, path, ("encoding", *floats, *counters, "buckets"))
    for k in floats:
        num(v[k], f"{path}.{k}")
    for k in counters:
        int_(v[k], f"{path}.{k}", 0, 2**31 - 1)
    bl = list_(v["buckets"], f"{path}.buckets")
    if not 1 <= len(bl) <= 60:
        raise _fail(f"{path}.buckets", "expected 1 to 60 bucket lists")
    for i, b in enumerate(bl):
        b = dict_(b, f"{path}.buckets[{i}]", ("totals", "variances"))
        for k in ("totals", "variances"):
            for j, x in enumerate(list_(b[k], f"{path}.buckets[{i}].{k}")):
                num(x, f"{path}.buckets[{i}].{k}[{j}]")


_OWN: Mapping[str, Callable[[dict[str, Any], str], None]] = {
    "ewma": _ewma, "cusum": _cusum, "page_hinkley": _river("page_hinkley", _ph),
    "adwin": _river("adwin", _adwin),
}


def check_drift(d: Any, path: str = "verdicts.drift") -> int:
    """``DriftMonitor.to_dict`` output of version 1, 2 or 3; returns the version."""
    from stream_analytics.drift import STREAMS

    d = dict_(d, path, ("version", "detectors", "max_keys_per_stream", "dropped", "slots",
                        "family_prev"), ("latency_prev", "latency_last_end"))
    v = int_(d["version"], f"{path}.version", 1, 3)
    kinds = frozenset(_OWN)
    for name, spec in dict_(d["detectors"], f"{path}.detectors", closed=False).items():
        p = f"{path}.detectors.{str_(name, path, 64)}"
        spec = dict_(spec, p, ("kind",), ("params",))
        if not isinstance(spec["kind"], str) or spec["kind"] not in kinds:
            raise _fail(f"{p}.kind", f"unknown detector kind {spec['kind']!r:.40}")
        _params(spec.get("params", {}), f"{p}.params", spec["kind"])
    int_(d["max_keys_per_stream"], f"{path}.max_keys_per_stream", 1)
    int_(d["dropped"], f"{path}.dropped", 0)
    for i, s in enumerate(list_(d["slots"], f"{path}.slots")):
        p = f"{path}.slots[{i}]"
        s = dict_(s, p, ("stream", "key", "n", "drift_count", "last_change_ns", "detectors"),
                  ("host",))
        str_(s.get("host", ""), f"{p}.host"), str_(s["key"], f"{p}.key")
        if not isinstance(s["stream"], str) or s["stream"] not in STREAMS:
            raise _fail(f"{p}.stream", f"unknown stream {s['stream']!r:.40}")
        int_(s["n"], f"{p}.n", 0)
        counts(s["drift_count"], f"{p}.drift_count")
        for k, t in dict_(s["last_change_ns"], f"{p}.last_change_ns", closed=False).items():
            opt(int_, t, f"{p}.last_change_ns.{k}")
        for k, det in dict_(s["detectors"], f"{p}.detectors", closed=False).items():
            _detector(det, f"{p}.detectors.{k}", kinds)
    width = 2 if v == 1 else 3  # host added in v2
    for name, n_str in (("family_prev", width), ("latency_prev", width - 1)):
        for i, e in enumerate(list_(d.get(name, []), f"{path}.{name}")):
            e = list_(e, f"{path}.{name}[{i}]", n_str + 2)
            for x in e[:n_str]:
                str_(x, f"{path}.{name}[{i}]")
            for x in e[n_str:]:
                int_(x, f"{path}.{name}[{i}]")
    last = d.get("latency_last_end", [])
    rows = [["", k, e] for k, e in last.items()] if isinstance(last, dict) else last
    for i, e in enumerate(list_(rows, f"{path}.latency_last_end")):
        e = list_(e, f"{path}.latency_last_end[{i}]", 3)
        str_(e[0], f"{path}.latency_last_end[{i}]"), str_(e[1], f"{path}.latency_last_end[{i}]")
        int_(e[2], f"{path}.latency_last_end[{i}]")
    return v


def check_state(st: Any, fields: tuple[str, ...] = ()) -> dict[str, Any]:
    """The consumer's checkpoint body (after the envelope's ``fields``)."""
    body = dict_(st, "checkpoint", ("engine", "last_seq"),
                 ("processed", "generation", "drops", "verdicts", *fields))
    st = body
    check_engine(st["engine"])
    int_(st["last_seq"], "last_seq", 0)
    for i, s in enumerate(list_(st.get("processed", []), "processed")):
        int_(s, f"processed[{i}]", 1)
    int_(st.get("generation", 0), "generation", 0)
    counts(st.get("drops", {}), "drops")
    if "verdicts" in st:
        vd = dict_(st["verdicts"], "verdicts", ("drift",))
        check_drift(vd["drift"])
    return body

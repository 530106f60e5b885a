"""ONNX Runtime profiler JSON to kernel and iteration spans, columnar.

ORT (``SessionOptions.enable_profiling``) writes a Chrome-trace JSON array,
one event per line. Used events:

* ``cat == "Node"`` and ``name`` ending in ``_kernel_time``: one executed
  kernel. ``ts``/``dur`` are µs since the profiler start; ``args.op_name`` is
  the ONNX op type, ``args.provider`` the execution provider, ``pid``/``tid``
  the OS process and thread.
* ``cat == "Session"`` and ``name == "model_run"``: one ``InferenceSession.run``.
* ``cat == "Kernel"`` (GPU EPs built with ``--enable_cuda_profiling`` /
  ``--enable_rocm_profiling``): one device kernel, listed after the ``Node``
  event that launched it; ``args.parent_name`` names that node event when
  ORT's GPU profiler could map it (read by :mod:`collectors.ort.attribution`).

Absolute times are ``profiling_start_ns + ts * 1000`` where
``profiling_start_ns`` is ``InferenceSession.get_profiling_start_time_ns()``.
Kernels are assigned to the run whose interval contains their start. The
parse uses ``pyarrow.json`` after turning the array into NDJSON, so no
Python object is made per event.

Errors: :class:`ProfileError` naming the file for a file that is not an ORT
profile.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from collectors.ort.families import family_of_op_types

_EVENT = pa.schema(
    [
        ("cat", pa.string()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("dur", pa.int64()),
        ("ts", pa.int64()),
        ("name", pa.string()),
        ("args", pa.struct([("op_name", pa.string()), ("provider", pa.string()),
                            ("parent_name", pa.string())])),
    ]
)
_SEP = re.compile(rb"\}\s*,\s*\n\s*\{")


class ProfileError(ValueError):
    """The file is not an ONNX Runtime profile."""


@dataclass(frozen=True)
class Profile:
    """Spans of one profiled session: KERNEL_SPAN- and ITERATION_SPAN-shaped."""

    kernels: pa.Table
    iterations: pa.Table
    events_per_run: list[int]


def _const(value: str, n: int) -> pa.DictionaryArray:
    """``n`` times ``value`` as ``dictionary<int32, string>`` (no per-row work)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))


def _dict(arr: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """``arr`` (strings) dictionary-encoded with int32 indices."""
    a = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    out: pa.DictionaryArray = a.dictionary_encode()
    return out


def read_events(path: Path) -> pa.Table:
    """All events of an ORT profile as a table with :data:`_EVENT` columns."""
    raw = path.read_bytes().strip()
    if not (raw.startswith(b"[") and raw.endswith(b"]")):
        raise ProfileError(f"{path}: not an ONNX Runtime profile (no JSON array)")
    body = _SEP.sub(b"}\n{", raw[1:-1].strip())
    if not body:
        return _EVENT.empty_table()
    try:
        return pj.read_json(
            io.BytesIO(body),
            parse_options=pj.ParseOptions(
                explicit_schema=_EVENT, unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowInvalid as e:
        raise ProfileError(f"{path}: not an ONNX Runtime profile ({e})") from None


def parse_profile(
    path: Path,
    *,
    start_ns: int,
    model: str,
    first_iteration: int = 0,
    skip_runs: int = 0,
) -> Profile:
    """Kernel and iteration spans from the profile at ``path``.

    The first ``skip_runs`` runs (warm-up) and their kernels are dropped;
    the rest are numbered from ``first_iteration``.
    """
    ev = read_events(path)
    is_run = pc.and_(pc.equal(ev["cat"], "Session"), pc.equal(ev["name"], "model_run"))
    runs = ev.filter(is_run)
    is_kernel = pc.and_(pc.equal(ev["cat"], "Node"), pc.ends_with(ev["name"], "_kernel_time"))
    ker = ev.filter(is_kernel)
    run_ts = runs["ts"].to_numpy()
    order = np.argsort(run_ts, kind="stable")
    run_ts = run_ts[order]
    run_dur = runs["dur"].to_numpy()[order]
    k_ts = ker["ts"].to_numpy()
    k_dur = ker["dur"].to_numpy()
    run_idx = np.searchsorted(run_ts, k_ts, side="right") - 1
    if len(run_ts):
        clipped = np.clip(run_idx, 0, None)
        inside = (run_idx >= 0) & (k_ts <= run_ts[clipped] + run_dur[clipped])
    else:
        inside = np.zeros(len(k_ts), bool)
    keep = inside & (run_idx >= skip_runs)
    counts = (np.bincount(run_idx[keep], minlength=len(run_ts)) if len(run_ts)
              else np.zeros(0, np.int64))
    ker = ker.filter(pa.array(keep))
    run_idx = run_idx[keep]
    k_ts, k_dur = k_ts[keep], k_dur[keep]
    # String columns leave as dictionary<int32, string>, the bus's own type, so
    # publishing does not re-encode them (each name repeats once per run).
    names = _dict(pc.utf8_slice_codeunits(ker["name"], 0, -len("_kernel_time")))
    op = _dict(ker["args"].combine_chunks().field("op_name") if ker.num_rows
               else pa.array([], pa.string()))
    n = ker.num_rows
    start = start_ns + k_ts * 1000
    kernels = pa.table(
        {
            "start_ns": start,
            "end_ns": start + k_dur * 1000,
            "duration_ns": k_dur * 1000,
            "source": _const("ort", n),
            "model": _const(model, n),
            "pid": ker["pid"],
            "tid": ker["tid"],
            "device_type": _const("cpu", n),
            "kernel_name": names,
            "kernel_family": family_of_op_types(op),
            "op_type": op,
            "node_name": names,
            "iteration": run_idx - skip_runs + first_iteration,
        }
    )
    sel = np.arange(skip_runs, len(run_ts))
    r_start = start_ns + run_ts[sel] * 1000
    pid = int(runs["pid"][0].as_py()) if runs.num_rows else 0
    iterations = pa.table(
        {
            "start_ns": r_start,
            "end_ns": r_start + run_dur[sel] * 1000,
            "duration_ns": run_dur[sel] * 1000,
            "source": _const("ort", len(sel)),
            "model": _const(model, len(sel)),
            "pid": pa.repeat(pa.scalar(pid, pa.int64()), len(sel)),
            "iteration": sel - skip_runs + first_iteration,
            "kernel_count": counts[sel].astype(np.int64),
        }
    )
    return Profile(kernels, iterations, counts.tolist())

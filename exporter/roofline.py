"""Roofline placement of GPU kernels from hardware counters.

Work per dispatch from the counters present (the counting conventions of
ROCm Compute Profiler, ``src/utils/roofline_calc.py`` and its "FLOP counting
conventions" docs; 64 is the wavefront width, one VALU instruction works on
64 lanes; one MFMA "MOP" is 512 FLOPs):

``valu_flops``  ``64 * sum_p (ADD_p + MUL_p + TRANS_p + 2 * FMA_p)`` over
                ``SQ_INSTS_VALU_{ADD,MUL,TRANS,FMA}_{F16,F32,F64}``
``mfma_flops``  ``512 * sum_p SQ_INSTS_VALU_MFMA_MOPS_p``, p in F16, BF16, F32, F64
``hbm_bytes``   formula by the counters present:

                * ``mi200`` (``TCC_EA_RDREQ_sum``, gfx90a):
                  ``32*RDREQ_32B + 64*(RDREQ - RDREQ_32B) + 64*WRREQ_64B
                  + 32*(WRREQ - WRREQ_64B)`` (``TCC_EA_*_sum``)
                * ``mi300`` (``TCC_EA0_RDREQ_sum``, gfx94x): ``128*TCC_BUBBLE
                  + 32*RDREQ_32B + 64*(RDREQ - TCC_BUBBLE - RDREQ_32B)
                  + 32*(WRREQ - WRREQ_64B) + 64*WRREQ_64B`` (``TCC_EA0_*_sum``)
                * ``fetch_write`` (rocprofv3 derived ``FETCH_SIZE``,
                  ``WRITE_SIZE``, in KiB): ``1024 * (FETCH_SIZE + WRITE_SIZE)``
``l2_bytes``    ``64 * TCP_TCC_{READ,WRITE,ATOMIC_WITH_RET,ATOMIC_WITHOUT_RET}_REQ_sum``

Arithmetic intensity is ``flops / hbm_bytes`` (FLOP/byte). Each kernel family
(and each of the longest kernels) is placed against the ceilings: the peak of
its dominant kind of FLOPs (MFMA of the dominant precision when MFMA FLOPs
exceed VALU FLOPs, else VALU FP64 when F64 dominates, else VALU FP32) and the
HBM bandwidth; ``ridge_point = peak_flops / hbm_bandwidth``; ``bound`` is
``memory`` below the ridge point and ``compute`` at or above it;
``attainable = min(peak, AI * bandwidth)``. Without FLOP counters (or bytes)
nothing is placed and ``missing`` names the counters needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from collectors.rocprof.counters import counter, durations_ns, read_counters
from collectors.rocprof.families import family_of
from collectors.rocprof.rejects import Rejects

PRECISIONS = ("F16", "F32", "F64")
MFMA_PRECISIONS = ("F16", "BF16", "F32", "F64")
F = npt.NDArray[np.float64]


@dataclass
class Work:
    """Per-dispatch work (arrays aligned with the counter table's rows)."""

    valu_flops: F | None = None
    valu_by_precision: dict[str, F] = field(default_factory=dict)
    mfma_by_precision: dict[str, F] = field(default_factory=dict)
    hbm_bytes: F | None = None
    l2_bytes: F | None = None
    flops_formula: str | None = None
    bytes_formula: str | None = None
    missing: list[str] = field(default_factory=list)

    @property
    def flops(self) -> F | None:
        parts = [a for a in (self.valu_flops, *self.mfma_by_precision.values()) if a is not None]
        return None if not parts else np.sum(parts, axis=0)


def work(t: pa.Table) -> Work:
    """FLOPs and bytes per dispatch from the counters in ``t`` (module doc)."""
    w = Work()
    n = t.num_rows
    for p in PRECISIONS:
        parts = {k: counter(t, f"SQ_INSTS_VALU_{k}_{p}") for k in ("ADD", "MUL", "TRANS", "FMA")}
        if any(v is not None for v in parts.values()):
            z = np.zeros(n)
            w.valu_by_precision[p] = 64.0 * (
                (parts["ADD"] if parts["ADD"] is not None else z)
                + (parts["MUL"] if parts["MUL"] is not None else z)
                + (parts["TRANS"] if parts["TRANS"] is not None else z)
                + 2.0 * (parts["FMA"] if parts["FMA"] is not None else z))
    for p in MFMA_PRECISIONS:
        v = counter(t, f"SQ_INSTS_VALU_MFMA_MOPS_{p}")
        if v is not None:
            w.mfma_by_precision[p] = 512.0 * v
    if w.valu_by_precision:
        w.valu_flops = np.sum(list(w.valu_by_precision.values()), axis=0)
    if w.valu_by_precision or w.mfma_by_precision:
        w.flops_formula = "64*(ADD+MUL+TRANS+2*FMA) per VALU precision + 512*MFMA_MOPS"
    else:
        w.missing.append("SQ_INSTS_VALU_{ADD,MUL,TRANS,FMA}_{F16,F32,F64} or "
                         "SQ_INSTS_VALU_MFMA_MOPS_* (FLOPs)")
    rd, rd32 = counter(t, "TCC_EA_RDREQ_sum"), counter(t, "TCC_EA_RDREQ_32B_sum")
    wr, wr64 = counter(t, "TCC_EA_WRREQ_sum"), counter(t, "TCC_EA_WRREQ_64B_sum")
    rd0, rd032 = counter(t, "TCC_EA0_RDREQ_sum"), counter(t, "TCC_EA0_RDREQ_32B_sum")
    wr0, wr064 = counter(t, "TCC_EA0_WRREQ_sum"), counter(t, "TCC_EA0_WRREQ_64B_sum")
    fetch, write = counter(t, "FETCH_SIZE"), counter(t, "WRITE_SIZE")
    if rd is not None and rd32 is not None and wr is not None and wr64 is not None:
        w.hbm_bytes = 32 * rd32 + 64 * (rd - rd32) + 64 * wr64 + 32 * (wr - wr64)
        w.bytes_formula = "mi200"
    elif rd0 is not None and rd032 is not None and wr0 is not None and wr064 is not None:
        bubble = counter(t, "TCC_BUBBLE_sum")
        b = bubble if bubble is not None else np.zeros(n)
        w.hbm_bytes = 128 * b + 32 * rd032 + 64 * (rd0 - b - rd032) + 32 * (wr0 - wr064) \
            + 64 * wr064
        w.bytes_formula = "mi300"
    elif fetch is not None and write is not None:
        w.hbm_bytes = 1024.0 * (fetch + write)
        w.bytes_formula = "fetch_write"
    else:
        w.missing.append("TCC_EA_{RD,WR}REQ{,_32B,_64B}_sum (MI200), TCC_EA0_* (MI300) "
                         "or FETCH_SIZE+WRITE_SIZE (HBM bytes)")
    l2 = [counter(t, f"TCP_TCC_{k}_REQ_sum") for k in
          ("READ", "WRITE", "ATOMIC_WITH_RET", "ATOMIC_WITHOUT_RET")]
    if any(v is not None for v in l2):
        w.l2_bytes = 64.0 * np.sum([v for v in l2 if v is not None], axis=0)
    return w


def _ceiling_key(valu: Mapping[str, float], mfma: Mapping[str, float]) -> str:
    """The ceiling of a group's dominant kind of FLOPs (module doc)."""
    v, m = sum(valu.values()), sum(mfma.values())
    if m > v:
        return "mfma_" + max(mfma, key=lambda k: mfma[k]).lower()
    if valu and max(valu, key=lambda k: valu[k]) == "F64":
        return "valu_f64"
    return "valu_f32"


def _place(row: dict[str, Any], valu: Mapping[str, float], mfma: Mapping[str, float],
           ceilings: Mapping[str, Any] | None) -> None:
    flops, by, dur = row["flops"], row["hbm_bytes"], row["duration_ns"]
    row["arithmetic_intensity"] = (flops / by if flops is not None and by else None)
    row["achieved_flops_per_s"] = flops / (dur / 1e9) if flops is not None and dur else None
    row["achieved_bytes_per_s"] = by / (dur / 1e9) if by is not None and dur else None
    key = _ceiling_key(valu, mfma)
    row["ceiling"] = key
    peaks = (ceilings or {}).get("peak_flops_per_s") or {}
    bw = (ceilings or {}).get("hbm_bytes_per_s")
    peak = peaks.get(key) or peaks.get("valu_f32")
    ai = row["arithmetic_intensity"]
    if flops == 0 and by:
        ai = row["arithmetic_intensity"] = 0.0
    if peak and bw and ai is not None:
        ridge = peak / bw
        row.update(peak_flops_per_s=peak, hbm_bytes_per_s=bw, ridge_point=ridge,
                   bound="memory" if ai < ridge else "compute",
                   attainable_flops_per_s=min(peak, ai * bw))
        ach = row["achieved_flops_per_s"]
        row["fraction_of_roof"] = (ach / row["attainable_flops_per_s"]
                                   if ach is not None and row["attainable_flops_per_s"] else None)
    else:
        row.update(peak_flops_per_s=peak, hbm_bytes_per_s=bw, ridge_point=None, bound=None,
                   attainable_flops_per_s=None, fraction_of_roof=None)


def _groups(labels: list[str], t: pa.Table, w: Work, dur: npt.NDArray[np.int64],
            ceilings: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    lab = np.array(labels, dtype=object)
    flops = w.flops
    out = []
    for name in sorted(set(labels)):
        m = lab == name
        valu = {p: float(a[m].sum()) for p, a in w.valu_by_precision.items()}
        mfma = {p: float(a[m].sum()) for p, a in w.mfma_by_precision.items()}
        row: dict[str, Any] = {
            "name": name, "dispatches": int(m.sum()),
            "flops": None if flops is None else float(flops[m].sum()),
            "valu_flops": valu, "mfma_flops": mfma,
            "hbm_bytes": None if w.hbm_bytes is None else float(w.hbm_bytes[m].sum()),
            "l2_bytes": None if w.l2_bytes is None else float(w.l2_bytes[m].sum()),
            "duration_ns": int(dur[m].sum()),
        }
        _place(row, valu, mfma, ceilings)
        out.append(row)
    return sorted(out, key=lambda r: (-r["duration_ns"], -(r["hbm_bytes"] or 0), r["name"]))


def roofline(counters: pa.Table, ceilings: Mapping[str, Any] | None,
             top_kernels: int = 50) -> dict[str, Any]:
    """``roofline.json``: kernel families and the ``top_kernels`` longest
    kernels placed against ``ceilings`` (``{"source", "peak_flops_per_s":
    {valu_f32, valu_f64, mfma_f16, mfma_bf16, mfma_f32, mfma_f64},
    "hbm_bytes_per_s"}``, FLOP/s and bytes/s; None: AI only, no placement).

    ``counters`` is :func:`collectors.rocprof.counters.read_counters`'s table.
    ``summary.bound`` is the bound of the placed families holding most of the
    kernel time (most HBM bytes when durations are unknown)."""
    w = work(counters)
    dur = durations_ns(counters)
    names = [str(n) for n in counters["kernel_name"].to_pylist()]
    families = _groups([family_of(n) for n in names], counters, w, dur, ceilings)
    kernels = _groups(names, counters, w, dur, ceilings)[:top_kernels]
    placed = [f for f in families if f["bound"] is not None]
    weight = {b: sum((f["duration_ns"] or 0) for f in placed if f["bound"] == b)
              for b in ("memory", "compute")}
    if not any(weight.values()):
        weight = {b: sum((f["hbm_bytes"] or 0) for f in placed if f["bound"] == b)
                  for b in ("memory", "compute")}
    total = sum(weight.values())
    bound = max(weight, key=lambda b: weight[b]) if placed else None
    return {
        "dispatches": counters.num_rows,
        "sources": sorted({str(s) for s in counters["source"].to_pylist()}),
        "formulas": {"flops": w.flops_formula, "hbm_bytes": w.bytes_formula,
                     "l2_bytes": "64*TCP_TCC_*_REQ_sum" if w.l2_bytes is not None else None,
                     "reference": "docs/calibration.md#roofline"},
        "missing": w.missing,
        "ceilings": dict(ceilings) if ceilings else None,
        "families": families,
        "kernels": kernels,
        "summary": {"bound": bound, "placed_families": len(placed),
                    "weight": "duration_ns" if any(f["duration_ns"] for f in placed)
                    else "hbm_bytes",
                    "memory_bound_share": weight["memory"] / total if total else None,
                    "compute_bound_share": weight["compute"] / total if total else None},
    }


GFX_FLOPS_PER_CLOCK_PER_CU: dict[str, dict[str, int]] = {
    # AMD CDNA2 / CDNA3 instruction-set whitepapers; peak = this * CUs * clock.
    # gfx90a: MI210 (104 CUs, 1.7 GHz) 22.6 TFLOP/s vector FP32/FP64, 45.3 matrix
    # FP32/FP64, 181 FP16/BF16.
    "gfx90a": {"valu_f32": 128, "valu_f64": 128, "mfma_f32": 256, "mfma_f64": 256,
               "mfma_f16": 1024, "mfma_bf16": 1024},
    # gfx942: MI300X (304 CUs, 2.1 GHz) 163.4 vector FP32, 81.7 vector FP64, 163.4
    # matrix FP32/FP64, 1307.4 dense FP16/BF16.
    "gfx942": {"valu_f32": 256, "valu_f64": 128, "mfma_f32": 256, "mfma_f64": 256,
               "mfma_f16": 2048, "mfma_bf16": 2048},
}
"""FLOPs per clock per compute unit of each kind, by GPU architecture (spec ceilings)."""

_RC_ROOFLINE = {"FP32Flops": "valu_f32", "FP64Flops": "valu_f64", "MFMAF16Flops": "mfma_f16",
                "MFMABF16Flops": "mfma_bf16", "MFMAF32Flops": "mfma_f32",
                "MFMAF64Flops": "mfma_f64"}


def _csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _beside(counters: pa.Table, name: str) -> Path | None:
    for src in counters["source"].unique().to_pylist():
        p = Path(str(src)).parent / name
        if p.is_file():
            return p
    return None


def gpu_ceilings(counters: pa.Table,
                 calibration: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The GPU ceilings for :func:`roofline`, first found of:

    1. ``calibration.json``'s GPU leg (``gpu_peak_flops_float32`` as the FP32
       VALU and MFMA peak, ``gpu_peak_flops_float16`` as MFMA F16/BF16,
       ``gpu_memory_bandwidth``);
    2. a rocprof-compute ``roofline.csv`` beside the counter files (its own
       empirical microbenchmarks, GFLOP/s and GB/s; device 0's row, as
       rocprof-compute's own roofline plot uses by default);
    3. the spec ceilings of the ``gpu_arch`` in a rocprof-compute ``sysinfo.csv``
       beside the counter files (:data:`GFX_FLOPS_PER_CLOCK_PER_CU` x
       ``cu_per_gpu`` x ``max_sclk`` MHz; ``hbm_bw`` GB/s).

    None when none is there."""
    ceil = (calibration or {}).get("ceilings") or {}
    if ceil.get("gpu_memory_bandwidth"):
        f32 = ceil.get("gpu_peak_flops_float32")
        f16 = ceil.get("gpu_peak_flops_float16")
        peaks = {k: v for k, v in (("valu_f32", f32), ("mfma_f32", f32), ("mfma_f16", f16),
                                   ("mfma_bf16", f16)) if v}
        return {"source": "calibration.json (GPU leg)", "peak_flops_per_s": peaks,
                "hbm_bytes_per_s": float(ceil["gpu_memory_bandwidth"])}
    rl = _beside(counters, "roofline.csv")
    if rl is not None:
        rows = _csv_rows(rl)
        row = next((r for r in rows if r.get("Device") == "0"), rows[0] if rows else None)
        if row is not None:
            return {"source": f"{rl} (rocprof-compute empirical roofline, device "
                              f"{row.get('Device')})",
                    "peak_flops_per_s": {k: float(row[c]) * 1e9 for c, k in _RC_ROOFLINE.items()
                                         if row.get(c)},
                    "hbm_bytes_per_s": float(row["HBMBw"]) * 1e9}
    si = _beside(counters, "sysinfo.csv")
    if si is not None:
        rows = _csv_rows(si)
        r = rows[0] if rows else {}
        spec = GFX_FLOPS_PER_CLOCK_PER_CU.get(r.get("gpu_arch", ""))
        if spec and r.get("cu_per_gpu") and r.get("max_sclk") and r.get("hbm_bw"):
            clk = float(r["max_sclk"]) * 1e6 * int(r["cu_per_gpu"])
            return {"source": f"spec: {r['gpu_arch']} {r.get('gpu_model')} "
                              f"({r['cu_per_gpu']} CUs x {r['max_sclk']} MHz, {si})",
                    "peak_flops_per_s": {k: v * clk for k, v in spec.items()},
                    "hbm_bytes_per_s": float(r["hbm_bw"]) * 1e9}
    return None


def reclassify(out: Path) -> dict[str, Any]:
    """Classify the bundle ``out`` again with its ``roofline.json`` and rewrite
    ``metrics/bottleneck.json`` (the streaming verdict, which had no counters,
    is kept as ``streaming_class``); returns the new verdict dict."""
    import json

    from exporter.sinks.bundle import write_json
    from stream_analytics.bottleneck import classify, device_of_bundle, features_from_bundle

    path = out / "metrics/bottleneck.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    verdict = classify(features_from_bundle(out), device_of_bundle(out)).to_json()
    verdict.update(streaming_class=old.get("class"), roofline="roofline.json",
                   thresholds="stream_analytics/thresholds.py")
    write_json(path, verdict)
    return verdict


def write_roofline(out: Path, paths: Sequence[Path], calibration_path: Path | None = None,
                   rejects: Rejects | None = None
                   ) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """Write ``out/roofline.json`` when ``paths`` hold counter data and, when it
    placed kernels, re-classify the bundle (:func:`reclassify`). Returns the
    roofline and the new verdict (None when nothing was placed); None, and
    nothing written, without counters."""
    from exporter.calibrate import default_path, find
    from exporter.sinks.bundle import write_json

    counters = read_counters(paths, rejects)
    if counters is None:
        return None
    data = roofline(counters, gpu_ceilings(counters, find(calibration_path or default_path())))
    write_json(out / "roofline.json", data)
    verdict = reclassify(out) if data["summary"]["placed_families"] else None
    return data, verdict

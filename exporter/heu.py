"""HEU, hardware efficiency utilisation: achieved performance ÷ calibrated ceiling.

For an ONNX Runtime capture on the CPU execution provider::

    achieved_flops_per_s = graph_flops_per_iteration * iterations / kernel_time_s
    heu                  = achieved_flops_per_s / cpu_peak_flops_<dtype>

``graph_flops_per_iteration`` comes from the graph and shape inference
(:mod:`collectors.ort.flops`, which lists the ops counted), ``iterations``
and ``kernel_time_s`` (the sum of the per-node ``duration_ns`` of every CPU
kernel span of the measured iterations) from ``profiler/kernels.parquet``,
and the peak from ``calibration.json`` (:mod:`exporter.calibrate`):
``float64`` when a graph input is double, else ``float32``.
``heu_matmul_conv`` does the same for the GEMM-like nodes only (their FLOPs
over the time of the kernels whose op type is MatMul/Gemm/Conv or a fused
form); ``heu_latency`` divides by the iterations' wall time instead of the
kernel time. All are ratios in [0, 1] when the ceiling is a true peak (a
noisy calibration can put them slightly above 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pyarrow as pa
import pyarrow.compute as pc

from collectors.ort.flops import MATMUL_CONV, GraphFlops

NEEDS_CALIBRATION = "HEU needs `aaco-exporter calibrate` (no calibration of this host at {path})"


def model_dtype(model: onnx.ModelProto) -> str:
    """``float64`` when a graph input is double, else ``float32``."""
    for inp in model.graph.input:
        if inp.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE:
            return "float64"
    return "float32"


def heu_metrics(kernels: pa.Table, iterations: pa.Table, flops: GraphFlops, dtype: str,
                calibration: dict[str, Any] | None, calibration_path: Path) -> dict[str, Any]:
    """``heu`` (a ratio, or None) and ``heu_inputs`` for ``derived_metrics.json``.

    ``kernels`` has the KERNEL_SPAN schema, ``iterations`` ITERATION_SPAN, both
    of one model. Without a calibration ``heu`` is None and ``heu_note`` says
    in one line to run ``aaco-exporter calibrate``.
    """
    cpu = kernels.filter(pc.equal(kernels["device_type"], "cpu"))
    n_iter = len(pc.unique(cpu["iteration"].drop_null())) if cpu.num_rows else 0
    kt_ns = int(pc.sum(cpu["duration_ns"]).as_py() or 0)
    mc = cpu.filter(pc.is_in(pc.cast(cpu["op_type"], pa.string()),
                             value_set=pa.array(sorted(MATMUL_CONV))))
    mc_ns = int(pc.sum(mc["duration_ns"]).as_py() or 0)
    wall_ns = int(pc.sum(iterations["duration_ns"]).as_py() or 0)
    done = flops.total * n_iter
    inputs: dict[str, Any] = {
        "graph_flops_per_iteration": flops.total,
        "matmul_conv_flops_per_iteration": flops.matmul_conv,
        "flops_by_op": flops.by_op,
        "unresolved_nodes": flops.unresolved,
        "iterations": n_iter,
        "kernel_time_ns": kt_ns,
        "matmul_conv_kernel_time_ns": mc_ns,
        "iteration_wall_ns": wall_ns,
        "achieved_flops_per_s": done / (kt_ns / 1e9) if kt_ns else None,
        "achieved_flops_per_s_latency": done / (wall_ns / 1e9) if wall_ns else None,
        "matmul_conv_flops_per_s": (flops.matmul_conv * n_iter / (mc_ns / 1e9)
                                    if mc_ns else None),
        "dtype": dtype,
        "ceiling": f"cpu_peak_flops_{dtype}",
        "definitions": "docs/calibration.md#heu",
    }
    out: dict[str, Any] = {"heu": None, "heu_matmul_conv": None, "heu_latency": None,
                           "heu_inputs": inputs}
    if calibration is None:
        out["heu_note"] = NEEDS_CALIBRATION.format(path=calibration_path)
        return out
    peak = float(calibration["ceilings"][f"cpu_peak_flops_{dtype}"])
    inputs["ceiling_flops_per_s"] = peak
    inputs["calibration"] = {"path": str(calibration_path),
                             "measured_at": calibration.get("measured_at"),
                             "host": calibration.get("host")}
    for key, achieved in (("heu", inputs["achieved_flops_per_s"]),
                          ("heu_matmul_conv", inputs["matmul_conv_flops_per_s"]),
                          ("heu_latency", inputs["achieved_flops_per_s_latency"])):
        out[key] = None if achieved is None else achieved / peak
    if cpu.num_rows == 0:
        out["heu_note"] = "HEU: no CPU kernel spans (GPU execution provider); see roofline.json"
    return out


def capture_heu(kernels: pa.Table, iterations: pa.Table, model: onnx.ModelProto,
                model_name: str, input_shapes: dict[str, list[int]],
                calibration_path: Path | None) -> dict[str, Any]:
    """:func:`heu_metrics` for one capture: the model's spans, its FLOPs at the
    fed ``input_shapes``, and this host's calibration (``calibration_path`` or
    :func:`exporter.calibrate.default_path`) when one exists."""
    from collectors.ort.flops import graph_flops
    from exporter.calibrate import default_path, find

    path = calibration_path or default_path()
    k = kernels.filter(pc.equal(pc.cast(kernels["model"], pa.string()), model_name))
    it = iterations.filter(pc.equal(pc.cast(iterations["model"], pa.string()), model_name))
    return heu_metrics(k, it, graph_flops(model, input_shapes), model_dtype(model),
                       find(path), path)

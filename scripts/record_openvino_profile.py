"""Record a real ONNX Runtime profile of a partitioned graph (OpenVINO + CPU).

Runs in the ``onnxruntime-openvino`` venv (``.venv-ov``, made by ``make
setup``), never in the project venv: both wheels install the module
``onnxruntime``. Only ``onnxruntime`` and ``numpy`` are imported.

Steps, for MODEL (e.g. magika's ``model.onnx``):

1. ORT's offline optimization on the CPU EP at ``ORT_ENABLE_ALL`` saves
   ``OUT/<stem>.ort_all.onnx``. Its NCHWc layout nodes (``ReorderInput``,
   ``com.microsoft.nchwc`` ``Conv``, ``ReorderOutput``) exist only in the CPU
   EP, so OpenVINO cannot take them: a real fallback.
2. A profiling session of that model with providers
   ``[OpenVINOExecutionProvider, CPUExecutionProvider]`` runs ``--runs``
   times on zero inputs (symbolic dimensions 1). OpenVINO compiles each
   cluster of nodes it supports into one fused node
   (``OpenVINOExecutionProvider_OpenVINO-EP-subgraph_<n>_<k>``); the rest run
   on the CPU EP, each with its own profile event.

Prints one JSON object on stdout: ``onnxruntime`` (version),
``onnxruntime_openvino`` (wheel version), ``available_providers``,
``providers`` (the session's), ``model`` (the optimized model path) and
``profile`` (the profile JSON path). Exits 1 with one line on stderr when
``OpenVINOExecutionProvider`` is not available.

Usage: ``.venv-ov/bin/python scripts/record_openvino_profile.py MODEL OUT [--runs N]``
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnxruntime as ort

OV = "OpenVINOExecutionProvider"
_DTYPES = {"tensor(float)": np.float32, "tensor(int32)": np.int32,
           "tensor(int64)": np.int64, "tensor(bool)": np.bool_}


def _inputs(sess: ort.InferenceSession) -> dict[str, np.ndarray]:
    return {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],
                             _DTYPES[i.type]) for i in sess.get_inputs()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if OV not in ort.get_available_providers():
        print(f"{OV} not in this onnxruntime ({ort.get_available_providers()}): "
              "install onnxruntime-openvino", file=sys.stderr)
        return 1
    a.out.mkdir(parents=True, exist_ok=True)
    optimized = a.out / f"{a.model.stem}.ort_all.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(optimized)
    ort.InferenceSession(str(a.model), so, providers=["CPUExecutionProvider"])

    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(a.out / "ort_profile_openvino")
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(optimized), so, providers=[OV, "CPUExecutionProvider"])
    feeds = _inputs(sess)
    for _ in range(a.runs):
        sess.run(None, feeds)
    profile = sess.end_profiling()
    print(json.dumps({
        "onnxruntime": ort.__version__,
        "onnxruntime_openvino": version("onnxruntime-openvino"),
        "available_providers": ort.get_available_providers(),
        "providers": sess.get_providers(),
        "model": str(optimized.resolve()),
        "profile": str(Path(profile).resolve()),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())

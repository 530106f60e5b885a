"""Bundle files of operator -> kernel attribution and EP placement (ORT captures).

Writes, from the ORT profiles a :class:`collectors.ort.ModelRunner` kept:

* ``attribution/op_to_kernel_map.parquet``
  (:data:`collectors.ort.attribution.MAP_SCHEMA`, measured runs only),
* ``attribution/kernel_groups.parquet``
  (:data:`collectors.ort.attribution.GROUPS_SCHEMA`),
* ``runtime/ort_config.json`` (:func:`collectors.ort.placement.ort_config`:
  providers, session options, node -> EP assignment, PFI).

Methods, score and PFI: docs/attribution.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnxruntime as ort
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from collectors.ort import ModelRunner
from collectors.ort.attribution import MAP_SCHEMA, from_ort_profile, kernel_groups
from collectors.ort.compiled import is_fused
from collectors.ort.placement import assignment_from_profile, ort_config, partition_graph
from exporter.sinks.bundle import write_json

MAP_FILE = "attribution/op_to_kernel_map.parquet"
GROUPS_FILE = "attribution/kernel_groups.parquet"
CONFIG_FILE = "runtime/ort_config.json"


def write_attribution(out: Path, runner: ModelRunner,
                      extra: pa.Table | None = None) -> dict[str, Any]:
    """Write the three files under ``out``; returns a summary dict
    (``attributed_kernels``, ``mean_score``, ``methods``, ``pfi``,
    ``partitions``, ``nodes``).

    ``extra``: more :data:`MAP_SCHEMA` rows (e.g. the ``roctx`` method's).
    """
    graph = runner.graph
    onnx_nodes = graph.nodes["name"].to_pylist()
    maps = [from_ort_profile(p, start_ns=s, skip_runs=w, first_iteration=f,
                             onnx_nodes=onnx_nodes) for p, s, w, f in runner.chunks]
    if extra is not None:
        maps.append(extra.select(MAP_SCHEMA.names).cast(MAP_SCHEMA))
    kmap = pa.concat_tables(maps) if maps else MAP_SCHEMA.empty_table()
    (out / MAP_FILE).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(kmap, out / MAP_FILE, compression="zstd")
    pq.write_table(kernel_groups(kmap), out / GROUPS_FILE, compression="zstd")

    assign: dict[str, str] = {}
    seq: list[str] = []
    for i, (path, *_) in enumerate(runner.chunks):
        a, s = assignment_from_profile(path)
        # each session numbers its compiled subgraphs anew (OpenVINO-EP-subgraph_3
        # in the second): the first profile's fused nodes stand for all
        assign.update((n, p) for n, p in a.items() if i == 0 or not is_fused(n, p))
        seq = seq or s
    opt, source = partition_graph(graph.path, runner.providers, runner.session_options())
    if opt is None:
        source = f"onnx model ({source})"
    sess = ort.InferenceSession(str(graph.path), runner.session_options(),
                                providers=runner.providers)
    cfg = ort_config(sess, assign, seq, opt or graph, source)
    write_json(out / CONFIG_FILE, cfg)
    methods = pc.value_counts(kmap["method"]).to_pylist() if kmap.num_rows else []
    return {
        "attributed_kernels": kmap.num_rows,
        "mean_score": pc.mean(kmap["score"]).as_py() if kmap.num_rows else None,
        "methods": {m["values"]: m["counts"] for m in methods},
        "pfi": cfg["pfi"], "partitions": cfg["partitions"], "nodes": cfg["nodes"],
    }

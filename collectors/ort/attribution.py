"""Operator -> kernel attribution: which ONNX Runtime graph node ran each kernel.

Three methods, each giving one row per kernel event of :data:`MAP_SCHEMA`
(``attribution/op_to_kernel_map.parquet``) with a ``method`` and a
``score`` in [0, 1], the confidence that the kernel belongs to the node:

``ort_node`` (score 1.0, or 0.5)
    ORT's profiler ``Node`` event ``<node>_kernel_time`` (``args.op_name``,
    ``args.provider``). On the CPU execution provider the node's kernel *is*
    this event, so the link is certain (1.0). On a device EP whose kernels
    were not recorded, the event times the host side of the node (its
    launches), a stand-in for the device kernels: 0.5.
``ort_kernel_parent`` (score 1.0) / ``ort_kernel_sequence`` (score 0.75)
    ORT's GPU profilers (onnxruntime built with ``--enable_cuda_profiling`` or
    ``--enable_rocm_profiling``) add ``cat == "Kernel"`` events after the
    ``Node`` event that launched them. With ``args.parent_name`` naming that
    node event the link is ORT's own (1.0); without it the kernel goes to the
    nearest preceding ``Node`` event in the file (the documented call-sequence
    order): 0.75.
``roctx`` (score 1.0, or 0.5)
    rocprofv3 ``--marker-trace`` ranges named exactly after a graph node
    (ORT builds with NVTX/roctx node ranges emit one per executed node,
    :mod:`collectors.rocprof.markers` reads them). A kernel goes to the
    range of its pid holding the start of its HIP launch call
    (:func:`exporter.ranges.kernel_join_time`): 1.0; when only the kernel's
    own start is known (no launch join) the device may run it after the range
    closed or during a later one: 0.5.

A node is ``in_onnx_graph`` when its name is a node of the original ONNX
model; ORT's optimizer renames, fuses and inserts nodes (for magika 92 of the
96 executed nodes keep their ONNX name).

:func:`kernel_groups` aggregates a map per node, op type and kernel family
(``attribution/kernel_groups.parquet``, :data:`GROUPS_SCHEMA`).

Errors: :class:`collectors.ort.profile.ProfileError` for a file that is not
an ORT profile.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.ort.families import family_of_op_types
from collectors.ort.profile import read_events
from exporter.ranges import join_ranges, kernel_join_time

MAP_SCHEMA = pa.schema([
    pa.field("iteration", pa.int64()),       # measured run index (capture numbering)
    pa.field("node_name", pa.string()),      # ORT graph node; null when unattributed
    pa.field("op_type", pa.string()),        # ONNX op type of the node
    pa.field("provider", pa.string()),       # execution provider of the node
    pa.field("kernel_name", pa.string()),    # CPU EP: the node name; GPU: device kernel
    pa.field("device_type", pa.string()),    # "cpu" or "gpu"
    pa.field("start_ns", pa.int64()),        # absolute ns (profiler start + ts)
    pa.field("duration_ns", pa.int64()),
    pa.field("method", pa.string()),         # ort_node, ort_kernel_parent, ...
    pa.field("score", pa.float64()),         # attribution confidence, 0..1
    pa.field("in_onnx_graph", pa.bool_()),   # node_name is a node of the ONNX model
])
"""``attribution/op_to_kernel_map.parquet``: one row per kernel event."""

GROUPS_SCHEMA = pa.schema([
    pa.field("level", pa.string()),          # "node", "op_type" or "family"
    pa.field("node_name", pa.string()),      # level node only
    pa.field("op_type", pa.string()),        # levels node and op_type
    pa.field("kernel_family", pa.string()),  # collectors.ort.families.FAMILIES
    pa.field("provider", pa.string()),
    pa.field("calls", pa.int64()),           # kernel events
    pa.field("distinct_kernels", pa.int64()),
    pa.field("iterations", pa.int64()),      # distinct iterations with a call
    pa.field("calls_per_iteration", pa.float64()),
    pa.field("total_ns", pa.int64()),
    pa.field("mean_ns", pa.float64()),
    pa.field("time_share", pa.float64()),    # total_ns / all kernels' total_ns
    pa.field("mean_score", pa.float64()),
])
"""``attribution/kernel_groups.parquet``: kernels per node, op type and family."""

CPU_PROVIDERS = frozenset({"CPUExecutionProvider", "XnnpackExecutionProvider",
                           "DnnlExecutionProvider", "ACLExecutionProvider"})
"""Execution providers whose ``Node`` event is the kernel itself."""

_KT = "_kernel_time"


def _rep(value: str, n: int) -> pa.Array:
    """``n`` times ``value`` as a string array (no per-row Python object)."""
    return pa.repeat(pa.scalar(value, pa.string()), n)


def _in(values: pa.Array, names: Iterable[str] | None) -> pa.Array:
    if names is None:
        return pa.nulls(len(values), pa.bool_())
    return pc.fill_null(pc.is_in(values, value_set=pa.array(sorted(set(names)), pa.string())),
                        False)


def from_ort_profile(path: Path, *, start_ns: int, skip_runs: int = 0,
                     first_iteration: int = 0,
                     onnx_nodes: Iterable[str] | None = None) -> pa.Table:
    """:data:`MAP_SCHEMA` rows from one ORT profile (methods ``ort_node``,
    ``ort_kernel_parent``, ``ort_kernel_sequence``).

    ``start_ns`` is the session's ``get_profiling_start_time_ns()``; events
    of the first ``skip_runs`` runs (warm-up) and events outside every
    ``model_run`` are dropped, the rest numbered from ``first_iteration``
    as in :func:`collectors.ort.profile.parse_profile`.
    """
    ev = read_events(path)
    order = np.arange(ev.num_rows)
    cat, name = ev["cat"].combine_chunks(), ev["name"].combine_chunks()
    is_run = pc.and_(pc.equal(cat, "Session"), pc.equal(name, "model_run"))
    is_node = pc.fill_null(pc.and_(pc.equal(cat, "Node"), pc.ends_with(name, _KT)), False)
    is_kern = pc.fill_null(pc.equal(cat, "Kernel"), False)
    runs = ev.filter(is_run)
    r_order = np.argsort(runs["ts"].to_numpy(), kind="stable")
    run_ts = np.asarray(runs["ts"].to_numpy(), np.int64)[r_order]
    run_end = run_ts + np.asarray(runs["dur"].to_numpy(), np.int64)[r_order]
    args = ev["args"].combine_chunks()
    node_name_all = pc.utf8_slice_codeunits(name, 0, -len(_KT))
    node_pos = order[np.asarray(is_node.to_numpy(zero_copy_only=False))]
    kern_pos = order[np.asarray(is_kern.to_numpy(zero_copy_only=False))]
    nodes_t = pa.RecordBatch.from_pydict({
        "name": node_name_all.take(node_pos),
        "op": args.field("op_name").take(node_pos),
        "provider": args.field("provider").take(node_pos)})
    # Kernel events: parent named by ORT, else the preceding Node event.
    parent_raw = args.field("parent_name").take(kern_pos)
    parent = pc.if_else(pc.ends_with(parent_raw, _KT),
                        pc.utf8_slice_codeunits(parent_raw, 0, -len(_KT)), parent_raw)
    prev = np.searchsorted(node_pos, kern_pos) - 1
    prev_name = pc.if_else(pa.array(prev >= 0),
                           nodes_t["name"].take(pa.array(np.clip(prev, 0, None))),
                           pa.nulls(len(kern_pos), pa.string())) if len(node_pos) else \
        pa.nulls(len(kern_pos), pa.string())
    known = pc.fill_null(pc.is_in(parent, value_set=nodes_t["name"]), False)
    k_node = pc.if_else(known, parent, prev_name)
    k_method = pc.if_else(known, "ort_kernel_parent", "ort_kernel_sequence")
    k_score = pc.if_else(known, 1.0, pc.if_else(pc.is_null(k_node), 0.0, 0.75))
    lookup = pc.index_in(k_node, value_set=nodes_t["name"])
    k_op = nodes_t["op"].take(lookup)
    k_prov = nodes_t["provider"].take(lookup)
    with_kernels = set(pc.unique(k_node.drop_null()).to_pylist()) if len(kern_pos) else set()
    on_cpu = _in(nodes_t["provider"], CPU_PROVIDERS)
    own = pc.or_(on_cpu, pc.invert(_in(nodes_t["name"], with_kernels)))
    n_keep = np.asarray(own.to_numpy(zero_copy_only=False))
    n_pos = node_pos[n_keep]
    n_tab = nodes_t.filter(pa.array(n_keep))
    n_score = pc.if_else(on_cpu.filter(pa.array(n_keep)), 1.0, 0.5)
    n = len(n_pos)
    m = len(kern_pos)
    pos = np.concatenate([n_pos, kern_pos])
    ts = np.asarray(ev["ts"].to_numpy(zero_copy_only=False), np.int64)[pos]
    dur = np.asarray(ev["dur"].to_numpy(zero_copy_only=False), np.int64)[pos]
    run = np.searchsorted(run_ts, ts, side="right") - 1
    inside = (run >= 0) & (ts <= run_end[np.clip(run, 0, None)]) if len(run_ts) else \
        np.zeros(len(ts), bool)
    keep = inside & (run >= skip_runs)
    node_col = pa.concat_arrays([n_tab["name"], k_node])
    table = pa.table({
        "iteration": run - skip_runs + first_iteration,
        "node_name": node_col,
        "op_type": pa.concat_arrays([n_tab["op"], k_op]),
        "provider": pa.concat_arrays([n_tab["provider"], k_prov]),
        "kernel_name": pa.concat_arrays([n_tab["name"],
                                         name.take(kern_pos)]),
        "device_type": pa.concat_arrays([_rep("cpu", n), _rep("gpu", m)]),
        "start_ns": start_ns + ts * 1000,
        "duration_ns": dur * 1000,
        "method": pa.concat_arrays([_rep("ort_node", n), k_method]),
        "score": pa.concat_arrays([n_score, k_score]).cast(pa.float64()),
        "in_onnx_graph": _in(node_col, onnx_nodes),
    }, schema=MAP_SCHEMA)
    return table.filter(pa.array(keep)).sort_by([("start_ns", "ascending")])


def from_roctx(kernels: pa.Table, regions: pa.Table, nodes: pa.Table) -> pa.Table:
    """:data:`MAP_SCHEMA` rows (method ``roctx``) for GPU ``kernels``.

    ``kernels``: KERNEL_SPAN columns (``start_ns``, ``duration_ns``, ``pid``,
    ``kernel_name``, optional ``launch_api_ns``/``launch_delay_ns``,
    ``iteration``); ``regions``: :data:`collectors.rocprof.markers.REGIONS`;
    ``nodes``: :data:`collectors.ort.graph.NODES_SCHEMA` (names and op types).
    Ranges whose name is not a node name are ignored; kernels outside every
    node range are left out; a kernel without a pid takes the ranges' pid
    when they all have one. ``provider`` is null (a trace does not say).
    """
    names = nodes["name"].combine_chunks()
    r = regions.filter(pc.fill_null(pc.is_in(regions["name"], value_set=names), False))
    t_join = kernel_join_time(kernels)
    start = np.asarray(kernels["start_ns"].to_numpy(), np.int64)
    r_pids = pc.unique(r["pid"]).drop_null()
    fill = int(r_pids[0].as_py()) if len(r_pids) == 1 else -1  # pid-less kernels
    pid = np.asarray(pc.fill_null(kernels["pid"], fill).to_numpy(), np.int64)
    idx = join_ranges(pid, t_join,
                      np.asarray(r["pid"].to_numpy(), np.int64),
                      np.asarray(r["start_ns"].to_numpy(), np.int64),
                      np.asarray(r["end_ns"].to_numpy(), np.int64))
    hit = idx >= 0
    k = kernels.filter(pa.array(hit))
    node = r["name"].take(pa.array(idx[hit]))
    op = nodes["op_type"].take(pc.index_in(node, value_set=names))
    score = np.where(t_join[hit] != start[hit], 1.0, 0.5)
    it = (pc.cast(k["iteration"], pa.int64()) if "iteration" in k.column_names
          else pa.nulls(k.num_rows, pa.int64()))
    return pa.table({
        "iteration": it,
        "node_name": node,
        "op_type": op,
        "provider": pa.nulls(k.num_rows, pa.string()),
        "kernel_name": pc.cast(k["kernel_name"], pa.string()),
        "device_type": _rep("gpu", k.num_rows),
        "start_ns": k["start_ns"],
        "duration_ns": k["duration_ns"],
        "method": _rep("roctx", k.num_rows),
        "score": score,
        "in_onnx_graph": pa.repeat(pa.scalar(True), k.num_rows),
    }, schema=MAP_SCHEMA)


def kernel_groups(kmap: pa.Table) -> pa.Table:
    """:data:`GROUPS_SCHEMA` rows from a :data:`MAP_SCHEMA` table: one group
    per (node, op type, provider), per (op type, provider) and per (kernel
    family, provider), the levels stacked; sorted by level then total time.
    Unattributed kernels (null ``node_name``) form their own null-keyed group.
    """
    fam = family_of_op_types(kmap["op_type"]).cast(pa.string()) if kmap.num_rows else \
        pa.array([], pa.string())
    t = kmap.append_column("kernel_family", fam)
    grand = int(pc.sum(t["duration_ns"]).as_py() or 0)
    aggs = [("duration_ns", "sum"), ("duration_ns", "count"), ("duration_ns", "mean"),
            ("kernel_name", "count_distinct"), ("iteration", "count_distinct"),
            ("score", "mean")]
    out = []
    for level, keys in (("node", ["node_name", "op_type", "kernel_family", "provider"]),
                        ("op_type", ["op_type", "kernel_family", "provider"]),
                        ("family", ["kernel_family", "provider"])):
        g = t.group_by(keys, use_threads=False).aggregate(aggs)
        n = g.num_rows
        calls = g["duration_ns_count"]
        iters = g["iteration_count_distinct"]
        col = {c: (g[c] if c in keys else pa.nulls(n, pa.string()))
               for c in ("node_name", "op_type", "kernel_family", "provider")}
        total = g["duration_ns_sum"]
        out.append(pa.table({
            "level": _rep(level, n), **col,
            "calls": calls, "distinct_kernels": g["kernel_name_count_distinct"],
            "iterations": iters,
            "calls_per_iteration": pc.divide(pc.cast(calls, pa.float64()),
                                             pc.cast(pc.max_element_wise(iters, 1), pa.float64())),
            "total_ns": total, "mean_ns": g["duration_ns_mean"],
            "time_share": pc.divide(pc.cast(total, pa.float64()), float(max(grand, 1))),
            "mean_score": g["score_mean"],
        }, schema=GROUPS_SCHEMA).sort_by([("total_ns", "descending")]))
    return pa.concat_tables(out)

"""Node -> execution-provider assignment of an ONNX Runtime session, and PFI.

Assignment source: ORT's profiler ``Node`` events (``<node>_kernel_time``
with ``args.provider``), the provider that actually ran each node, so a node
ORT placed on the CPU because the preferred EP lacks a kernel for it shows up
as ``CPUExecutionProvider``. Node names are those of ORT's *optimized* graph
(fused or inserted nodes included), which :func:`optimized_graph` saves with
``SessionOptions.optimized_model_filepath`` to get its data edges.

PFI (partition fragmentation index) = partitions ÷ nodes, where

* *nodes* is the number of distinct executed nodes with a provider, and
* *partitions* is the number of weakly connected components of the graph
  whose vertices are those nodes and whose edges are the data edges (producer
  -> consumer of a tensor) joining two nodes **on the same provider**: a
  partition is a maximal set of same-EP nodes connected through same-EP
  edges, the unit ORT hands to one EP (its ``IndexedSubGraph``).

An EP that compiles (OpenVINO, MIGraphX, …) runs each subgraph it took as
one fused node (:mod:`collectors.ort.compiled`): each fused node is one
partition, the unit ORT really handed it, and the graph nodes inside it
(those with no event of their own) take its provider in the assignment. Two
fused nodes of one EP are two partitions even when their nodes touch: ORT
splits a cluster when one piece would feed the other through a fallback
node (merging them would make a cycle), so connectivity alone undercounts.

Bounds: 1/nodes (the whole connected graph on one EP) <= PFI <= 1 (every
node its own partition). A graph that is itself made of k disconnected
pieces on one EP has PFI = k/nodes. ``ep_transitions`` counts provider
changes along the execution order of one run (a topological order ORT
chose): also 0 on a single EP.

Errors: :class:`collectors.ort.profile.ProfileError` for a bad profile.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pyarrow.compute as pc
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from collectors.ort.compiled import expand_compiled
from collectors.ort.graph import Graph, ModelError, load_graph
from collectors.ort.profile import read_events

_KT = "_kernel_time"


def assignment_from_profile(path: Path) -> tuple[dict[str, str], list[str]]:
    """``({node: provider}, providers of the first run's nodes in execution order)``
    from one ORT profile's ``Node`` events.

    A node seen on two providers keeps the last one (ORT never moves a node
    within a session).
    """
    ev = read_events(path)
    is_run = pc.and_(pc.equal(ev["cat"], "Session"), pc.equal(ev["name"], "model_run"))
    runs = ev.filter(is_run)
    node = ev.filter(pc.fill_null(pc.and_(pc.equal(ev["cat"], "Node"),
                                          pc.ends_with(ev["name"], _KT)), False))
    names = pc.utf8_slice_codeunits(node["name"], 0, -len(_KT)).to_pylist()
    provs = node["args"].combine_chunks().field("provider").to_pylist()
    assign = {n: p for n, p in zip(names, provs, strict=True) if p}
    seq: list[str] = []
    if runs.num_rows:
        first = int(np.argmin(runs["ts"].to_numpy()))
        t0 = int(runs["ts"][first].as_py())
        t1 = t0 + int(runs["dur"][first].as_py())
        ts = np.asarray(node["ts"].to_numpy())
        order = np.argsort(ts, kind="stable")
        seq = [provs[i] for i in order if t0 <= ts[i] <= t1 and provs[i]]
    return assign, seq


def partitions(assign: Mapping[str, str], edges: Iterable[tuple[str, str]]) -> int:
    """Weakly connected components of ``assign``'s nodes joined by same-provider
    ``edges`` (``(src, dst)`` node names; edges naming other nodes are ignored)."""
    names = sorted(assign)
    idx = {n: i for i, n in enumerate(names)}
    src, dst = [], []
    for s, d in edges:
        if s in idx and d in idx and assign[s] == assign[d]:
            src.append(idx[s])
            dst.append(idx[d])
    n = len(names)
    if n == 0:
        return 0
    g = coo_matrix((np.ones(len(src)), (np.array(src, np.int64), np.array(dst, np.int64))),
                   shape=(n, n))
    k, _ = connected_components(g, directed=True, connection="weak")
    return int(k)


def transitions(seq: Sequence[str]) -> int:
    """Provider changes between consecutive nodes of ``seq``.

    >>> transitions(["CPU", "CPU", "ROCM", "CPU"])
    2
    """
    return sum(1 for a, b in pairwise(seq) if a != b)


def pfi_summary(assign: Mapping[str, str], edges: Iterable[tuple[str, str]],
                seq: Sequence[str], compiled: Mapping[str, str] | None = None,
                members: Iterable[str] = ()) -> dict[str, Any]:
    """``nodes``, ``partitions``, ``pfi``, ``ep_transitions`` and nodes per provider.

    ``compiled`` (fused node -> provider) and ``members`` (nodes that ran
    inside them) come from :func:`collectors.ort.compiled.expand_compiled`:
    each fused node is one partition; the other nodes form partitions by
    same-provider edges (:func:`partitions`).

    >>> pfi_summary({"a": "X", "b": "CPU", "c": "X"}, [("a", "b"), ("b", "c")],
    ...             ["X", "CPU", "X"])["pfi"]
    1.0
    >>> s = pfi_summary({"a": "OV", "b": "CPU", "c": "OV"}, [("a", "b"), ("b", "c"), ("a", "c")],
    ...                 ["OV", "CPU", "OV"], {"OV_s_1_0": "OV", "OV_s_2_1": "OV"}, ["a", "c"])
    >>> s["partitions"]
    3
    """
    compiled = compiled or {}
    inside = set(members) | set(compiled)
    n = len(assign)
    k = partitions({a: p for a, p in assign.items() if a not in inside}, edges) + len(compiled)
    return {"nodes": n, "partitions": k, "pfi": (k / n) if n else None,
            "ep_transitions": transitions(seq),
            "nodes_per_provider": dict(sorted(Counter(assign.values()).items())),
            "compiled_subgraphs": dict(sorted(compiled.items())),
            "nodes_in_compiled_subgraphs": len(set(members))}


def placement_summary(assign: Mapping[str, str], seq: Sequence[str],
                      graph: Graph | None) -> dict[str, Any]:
    """The node -> provider part of ``runtime/ort_config.json`` from one
    profile's ``assign``/``seq`` (:func:`assignment_from_profile`) and the
    reference ``graph`` (edges; ``None``: no edges).

    Fused nodes of a compiling EP are expanded to the graph's nodes without
    an event of their own (:func:`collectors.ort.compiled.expand_compiled`);
    profile nodes missing from ``graph`` are listed in ``nodes_not_in_graph``
    and count as partitions of their own.
    """
    edges: list[tuple[str, str]] = []
    if graph is not None:
        edges = list(zip(graph.edges["src_node"].to_pylist(),
                         graph.edges["dst_node"].to_pylist(), strict=True))
        runnable = pc.not_equal(graph.nodes["op_type"], "Constant")
        names = graph.nodes["name"].filter(runnable).to_pylist()
    else:
        names = []
    ex = expand_compiled(assign, names)
    known = set(graph.nodes["name"].to_pylist()) if graph is not None else set()
    return {
        "nodes_not_in_graph": sorted(set(ex.assign) - known - set(ex.compiled)),
        **pfi_summary(ex.assign, edges, seq, ex.compiled, ex.members),
        "assignment": dict(sorted(ex.assign.items())),
    }


def optimized_graph(model: Path, providers: list[str],
                    options: ort.SessionOptions | None = None) -> tuple[Graph | None, str]:
    """ORT's optimized graph of ``model`` for ``providers``, and where it came from.

    Returns ``(graph, "optimized")``, or ``(None, reason)`` when ORT cannot
    serialize it (EPs that compile subgraphs into opaque nodes refuse).
    ``options`` is changed: the file path, and ORT's log level raised to
    errors (3) for this graph-only session, whose warnings are about the
    temporary file (above ``ORT_ENABLE_EXTENDED``, ORT warns on every save
    that it "may contain hardware specific optimizations") or repeat the
    measured session's.
    """
    so = options or ort.SessionOptions()
    so.log_severity_level = max(so.log_severity_level, 3)
    with tempfile.TemporaryDirectory(prefix="aaco-opt-") as d:
        path = Path(d) / "optimized.onnx"
        so.optimized_model_filepath = str(path)
        try:
            ort.InferenceSession(str(model), so, providers=providers)
            return load_graph(path), "optimized"
        except (ModelError, RuntimeError, ort.capi.onnxruntime_pybind11_state.Fail) as e:
            return None, f"optimized model not saved: {type(e).__name__}: {e}"


def partition_graph(model: Path, providers: list[str],
                    options: ort.SessionOptions | None = None) -> tuple[Graph | None, str]:
    """The reference graph for the node -> provider map, and where it came from.

    ORT's optimized graph for ``providers`` (:func:`optimized_graph`) when it
    can be saved. A session with an EP that compiles subgraphs (OpenVINO,
    MIGraphX, …) cannot save it; then the graph ORT partitioned: the model
    after the provider-independent level-1 optimizations, saved on the CPU EP
    at ``ORT_ENABLE_BASIC`` (``ORT_DISABLE_ALL`` if the session disables
    them). Its nodes without an event of their own ran inside the compiled
    subgraphs (:mod:`collectors.ort.compiled`). ``(None, reasons)`` when
    neither can be saved.
    """
    graph, source = optimized_graph(model, providers, options)
    if graph is not None:
        return graph, source
    so = options or ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    if so.graph_optimization_level != level.ORT_DISABLE_ALL:
        so.graph_optimization_level = level.ORT_ENABLE_BASIC
    name = str(so.graph_optimization_level).rsplit(".", 1)[-1]
    g1, why = optimized_graph(model, ["CPUExecutionProvider"], so)
    if g1 is None:
        return None, f"{source}; {why}"
    return g1, f"partitioned (the graph at {name} on CPUExecutionProvider; {source})"


def session_options(so: ort.SessionOptions) -> dict[str, Any]:
    """The settable ``SessionOptions`` fields as JSON values."""
    return {
        "graph_optimization_level": str(so.graph_optimization_level).rsplit(".", 1)[-1],
        "execution_mode": str(so.execution_mode).rsplit(".", 1)[-1],
        "execution_order": str(so.execution_order).rsplit(".", 1)[-1],
        "intra_op_num_threads": so.intra_op_num_threads,
        "inter_op_num_threads": so.inter_op_num_threads,
        "enable_cpu_mem_arena": so.enable_cpu_mem_arena,
        "enable_mem_pattern": so.enable_mem_pattern,
        "enable_mem_reuse": so.enable_mem_reuse,
        "use_deterministic_compute": so.use_deterministic_compute,
        "log_severity_level": so.log_severity_level,
    }


def ort_config(sess: ort.InferenceSession, assign: Mapping[str, str], seq: Sequence[str],
               graph: Graph | None, graph_source: str) -> dict[str, Any]:
    """``runtime/ort_config.json``: providers, session options, the node ->
    provider assignment and its PFI (:func:`pfi_summary`).

    ``graph`` gives the edges (ORT's optimized graph, else the ONNX model);
    ``graph_source`` says which. See :func:`placement_summary`.
    """
    return {
        "onnxruntime_version": ort.__version__,
        "available_providers": ort.get_available_providers(),
        "providers": sess.get_providers(),
        "provider_options": sess.get_provider_options(),
        "session_options": session_options(sess.get_session_options()),
        "assignment_source": "ort_profile Node events (args.provider); nodes inside a "
                             "compiled subgraph: graph nodes without an event of their own",
        "graph_source": graph_source,
        **placement_summary(assign, seq, graph),
        "definitions": "docs/attribution.md",
    }


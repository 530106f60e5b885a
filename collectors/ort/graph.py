"""ONNX graph facts read with ``onnx``: nodes, edges and the op histogram.

``node_count`` excludes ``Constant`` nodes (they hold initial values and
never run as kernels in ONNX Runtime); ``total_nodes`` includes them. Only
the top-level graph is counted; nodes inside ``If``/``Loop`` subgraphs are
not (ORT profiles them as part of the control-flow node).

Errors: :class:`ModelError` for a missing file or a file that is not a valid
ONNX model; the message names the path. ``onnx`` (the ``ort`` extra) is
imported by :func:`load_graph`; :class:`~exporter.extras.MissingExtra`
without it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from exporter.extras import require

if TYPE_CHECKING:
    import onnx

NODES_SCHEMA = pa.schema(
    [
        ("node_index", pa.int64()),
        ("name", pa.string()),
        ("op_type", pa.string()),
        ("domain", pa.string()),
        ("inputs", pa.list_(pa.string())),
        ("outputs", pa.list_(pa.string())),
    ]
)
EDGES_SCHEMA = pa.schema(
    [
        ("src_node", pa.string()),
        ("dst_node", pa.string()),
        ("tensor", pa.string()),
    ]
)


class ModelError(ValueError):
    """The model file is missing, unreadable, or not ONNX."""


@dataclass(frozen=True)
class Graph:
    """Facts about one ONNX model.

    ``nodes`` has :data:`NODES_SCHEMA` (one row per top-level node), ``edges``
    has :data:`EDGES_SCHEMA` (producer -> consumer per tensor).
    """

    name: str
    path: Path
    sha256: str
    nodes: pa.Table
    edges: pa.Table
    op_histogram: dict[str, int]
    proto: onnx.ModelProto

    @property
    def node_count(self) -> int:
        """Nodes that can execute: every node except ``Constant``."""
        return int(sum(n for op, n in self.op_histogram.items() if op != "Constant"))

    @property
    def total_nodes(self) -> int:
        return int(self.nodes.num_rows)

    def info_table(self, pid: int | None = None) -> pa.Table:
        """One GRAPH_INFO row (see :mod:`exporter.schema`)."""
        ops = sorted(self.op_histogram)
        return pa.table(
            {
                "model": [self.name],
                "model_path": [str(self.path)],
                "sha256": [self.sha256],
                "node_count": [self.node_count],
                "total_nodes": [self.total_nodes],
                "edge_count": [self.edges.num_rows],
                "op_types": [ops],
                "op_counts": [[self.op_histogram[o] for o in ops]],
                "pid": [pid],
            }
        )


def default_model_name(path: Path) -> str:
    """File stem, or the parent folder when the stem is generic (``model``)."""
    return path.parent.name if path.stem.lower() in {"model", "model_fp32", "onnx"} else path.stem


def load_graph(path: str | Path, name: str | None = None) -> Graph:
    """Load ``path`` with onnx (external data not loaded) and describe it."""
    p = Path(path)
    if not p.is_file():
        raise ModelError(f"{p}: no such model file")
    onnx = require("onnx", "ort", "reading an ONNX model")
    data = p.read_bytes()
    try:
        model = onnx.load_from_string(data)
    except Exception as e:  # protobuf raises DecodeError and others
        raise ModelError(f"{p}: not an ONNX model ({type(e).__name__}: {e})") from None
    if not model.graph.node:
        raise ModelError(f"{p}: not an ONNX model (the graph has no nodes)")
    nodes = model.graph.node
    names = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(nodes)]
    producer = {out: names[i] for i, n in enumerate(nodes) for out in n.output}
    src, dst, tensor = [], [], []
    for i, n in enumerate(nodes):
        for t in n.input:
            if t in producer:
                src.append(producer[t])
                dst.append(names[i])
                tensor.append(t)
    node_table = pa.table(
        {
            "node_index": list(range(len(nodes))),
            "name": names,
            "op_type": [n.op_type for n in nodes],
            "domain": [n.domain or "ai.onnx" for n in nodes],
            "inputs": [list(n.input) for n in nodes],
            "outputs": [list(n.output) for n in nodes],
        },
        schema=NODES_SCHEMA,
    )
    edges = pa.table({"src_node": src, "dst_node": dst, "tensor": tensor}, schema=EDGES_SCHEMA)
    return Graph(
        name=name or default_model_name(p),
        path=p.resolve(),
        sha256=hashlib.sha256(data).hexdigest(),
        nodes=node_table,
        edges=edges,
        op_histogram=dict(Counter(n.op_type for n in nodes)),
        proto=model,
    )

"""PFI computed straight from an ORT profile's JSON events and the ONNX
protobuf, sharing no code with collectors/ort: the tests' reference."""

from __future__ import annotations

import json
from pathlib import Path

import onnx


def reference_pfi(profile: Path, model: Path) -> dict[str, object]:
    """``{"nodes", "partitions", "pfi", "cpu", "fused"}`` where fused nodes are
    the profile's node events that name no graph node (one partition each)
    and the other events' nodes form partitions by same-provider edges
    (union-find); every non-``Constant`` graph node counts."""
    graph = onnx.load(str(model), load_external_data=False).graph
    nodes = [n for n in graph.node if n.op_type != "Constant"]
    names = {n.name for n in nodes}
    events = [e for e in json.loads(profile.read_text())
              if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    provider = {e["name"][: -len("_kernel_time")]: e["args"]["provider"] for e in events}
    fused = {n for n in provider if n not in names}
    single = {n: p for n, p in provider.items() if n in names}
    parent = {n: n for n in single}

    def root(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    producer = {out: n.name for n in nodes for out in n.output}
    for n in nodes:
        for t in n.input:
            a = producer.get(t)
            if a in single and n.name in single and single[a] == single[n.name]:
                parent[root(a)] = root(n.name)
    k = len(fused) + len({root(n) for n in single})
    return {"nodes": len(names), "partitions": k, "pfi": k / len(names),
            "cpu": sorted(n for n, p in single.items() if p == "CPUExecutionProvider"),
            "fused": sorted(fused)}

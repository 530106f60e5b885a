"""Compiled-subgraph nodes of ONNX Runtime profiles, mapped back to graph nodes.

An execution provider that compiles (OpenVINO, MIGraphX, TensorRT, …) takes
each cluster of nodes it supports and ORT replaces it with one fused node
named ``<provider>_<meta_def name>_<k>``, whose op type is the meta_def name,
e.g. ``OpenVINOExecutionProvider_OpenVINO-EP-subgraph_2_1`` (op
``OpenVINO-EP-subgraph_2``). The profile has one ``Node`` event per fused
node per run and no event for the nodes inside it; nodes the EP left to
another provider (a fallback) keep an event of their own.

:func:`expand_compiled` recovers a node -> provider map over the whole
graph: the nodes of the reference graph with no event of their own ran
inside the fused nodes. Which fused node holds which of them is not in the
profile; when every fused node belongs to one provider the provider of each
is known, which is all PFI needs (each fused node is one partition). With
fused nodes of two or more providers the members cannot be told apart and
the map is returned unexpanded.

Exact when the reference graph is the one the EP partitioned (ORT's
level-1-optimized graph; e.g. a model optimized offline and loaded as is).
A node ORT removed before partitioning (constant folding) would be counted
as a member; a fallback node ORT renamed after partitioning (level 2/3
fusions on the CPU EP) is reported by the caller as not in the graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_FUSED = re.compile(r"^(?P<ep>[A-Za-z0-9]+ExecutionProvider)_.+_\d+$")


def is_fused(node: str, provider: str) -> bool:
    """``node`` is ORT's name for a compiled subgraph of ``provider``.

    >>> is_fused("OpenVINOExecutionProvider_OpenVINO-EP-subgraph_1_0", "OpenVINOExecutionProvider")
    True
    >>> is_fused("Conv_0", "CPUExecutionProvider")
    False
    """
    m = _FUSED.match(node)
    return m is not None and m["ep"] == provider


@dataclass(frozen=True)
class Expanded:
    """A node -> provider map with compiled subgraphs resolved.

    ``assign``: every node -> provider (members of compiled subgraphs
    included when resolvable, else the fused nodes themselves);
    ``compiled``: fused node -> provider; ``members``: graph nodes that ran
    inside a fused node.
    """

    assign: dict[str, str]
    compiled: dict[str, str] = field(default_factory=dict)
    members: frozenset[str] = frozenset()


def expand_compiled(assign: Mapping[str, str], graph_nodes: Iterable[str]) -> Expanded:
    """Replace the fused nodes of ``assign`` (profile node -> provider) by the
    ``graph_nodes`` (names of the reference graph's nodes that can run, so
    without ``Constant``) that have no profile event of their own.

    >>> e = expand_compiled({"OVExecutionProvider_sub_1_0": "OVExecutionProvider",
    ...                      "b": "CPUExecutionProvider"}, ["a", "b", "c"])
    >>> e.assign == {"a": "OVExecutionProvider", "b": "CPUExecutionProvider",
    ...              "c": "OVExecutionProvider"}, sorted(e.members)
    (True, ['a', 'c'])
    """
    names = list(graph_nodes)
    known = set(names)
    compiled = {n: p for n, p in assign.items() if n not in known and is_fused(n, p)}
    if not compiled:
        return Expanded(dict(assign))
    providers = set(compiled.values())
    if len(providers) > 1:
        return Expanded(dict(assign), compiled)
    ep = providers.pop()
    members = frozenset(n for n in names if n not in assign)
    if not members:
        return Expanded(dict(assign), compiled)
    out = {n: p for n, p in assign.items() if n not in compiled}
    out.update((n, ep) for n in members)
    return Expanded(out, compiled, members)

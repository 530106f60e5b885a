"""Span trees ready for export: one buffer and one readiness rule for every
OTLP trace output (the SDK exporter :mod:`exporter.sinks.otlp` and OTLP on
the bus :mod:`exporter.sinks.otlp_bus`).

Kernel spans (``KERNEL_SPAN``) and iteration spans (``ITERATION_SPAN``)
arrive in any order and any messages, per host. :meth:`SpanAssembler.take`
releases, per host, the rows that are ready:

* an iteration when ``kernel_count`` of its kernels are buffered (matched on
  model, pid and iteration, :func:`exporter.sinks.otlp_proto.match_iterations`),
  or when it has waited ``hold_s`` seconds since it arrived, or at the end
  (``final``);
* a kernel with an iteration number together with its iteration; one whose
  iteration span has not arrived after ``hold_s`` goes without it (under
  the synthetic ``kernels`` span of :func:`~exporter.sinks.otlp_proto.plan_spans`);
* a kernel without iteration number (a raw GPU dispatch) at once.

Each row is released exactly once. ``hold_s`` is measured on the caller's
clock (``now``, seconds; the sinks pass ``time.monotonic()``), so tests
drive it explicitly. At most ``max_rows`` kernel rows wait per host; past
that, the oldest waiting rows are released early and counted in
``released_early`` (never dropped). The span ids of the released trees are
deterministic (:func:`~exporter.sinks.otlp_proto.traces_request`), so every
output names a span the same way.

Thread-safe: one lock guards the buffers (ingest runs on the event loop,
flushes on a worker thread).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from exporter import schema
from exporter.sinks.otlp_proto import match_iterations

DEFAULT_HOLD_S = 5.0
"""How long an incomplete iteration, or a kernel waiting for its iteration, is held."""


@dataclass
class _Host:
    kernels: list[pa.Table] = field(default_factory=list)
    kernel_since: list[npt.NDArray[np.float64]] = field(default_factory=list)
    iterations: list[pa.Table] = field(default_factory=list)
    iteration_since: list[npt.NDArray[np.float64]] = field(default_factory=list)

    def kernel_rows(self) -> int:
        return sum(t.num_rows for t in self.kernels)


def _concat(parts: list[pa.Table], since: list[npt.NDArray[np.float64]],
            sch: pa.Schema) -> tuple[pa.Table, npt.NDArray[np.float64]]:
    if not parts:
        return sch.empty_table(), np.zeros(0)
    t = pa.concat_tables(parts).unify_dictionaries().combine_chunks()
    return t, np.concatenate(since)


class SpanAssembler:
    """Buffers kernel and iteration spans per host and releases ready rows.

    >>> from exporter.schema import ITERATION_SPAN
    >>> a = SpanAssembler(hold_s=5.0)
    >>> a.add("h", "iteration_span", pa.Table.from_pylist([{
    ...     "ts_ns": 1, "start_ns": 0, "end_ns": 10, "duration_ns": 10, "model": "m",
    ...     "pid": 1, "iteration": 0, "kernel_count": 1, "source": "ort"}],
    ...     schema=ITERATION_SPAN), now=0.0)   # waiting kernel rows
    0
    >>> a.take(now=1.0)   # its kernel has not arrived: held
    []
    >>> [(h, k.num_rows, i.num_rows) for h, k, i in a.take(now=5.0)]   # held hold_s
    [('h', 0, 1)]
    """

    def __init__(self, hold_s: float = DEFAULT_HOLD_S, max_rows: int = 1_000_000) -> None:
        self.hold_s = hold_s
        self.max_rows = max_rows
        self.released_early = 0
        self._lock = threading.Lock()
        self._hosts: dict[str, _Host] = {}

    def add(self, host: str, signal: str, table: pa.Table, now: float) -> int:
        """Buffer ``table`` of ``signal`` (``kernel_span``/``iteration_span``;
        others are ignored); returns the host's waiting kernel rows."""
        stamp = np.full(table.num_rows, now, dtype=np.float64)
        with self._lock:
            h = self._hosts.setdefault(host, _Host())
            if signal == "kernel_span":
                h.kernels.append(table)
                h.kernel_since.append(stamp)
            elif signal == "iteration_span":
                h.iterations.append(table)
                h.iteration_since.append(stamp)
            return h.kernel_rows()

    def waiting(self) -> tuple[int, int]:
        """(kernel rows, iteration rows) buffered over all hosts."""
        with self._lock:
            return (sum(h.kernel_rows() for h in self._hosts.values()),
                    sum(t.num_rows for h in self._hosts.values() for t in h.iterations))

    def take(self, now: float, final: bool = False) -> list[tuple[str, pa.Table, pa.Table]]:
        """Release the ready rows: ``[(host, kernels, iterations)]`` for each
        host with any (both tables keep their bus schemas; either may be empty)."""
        with self._lock:
            hosts, self._hosts = self._hosts, {}
        out: list[tuple[str, pa.Table, pa.Table]] = []
        keep: dict[str, _Host] = {}
        for host, h in hosts.items():
            ks, k_since = _concat(h.kernels, h.kernel_since, schema.KERNEL_SPAN)
            its, i_since = _concat(h.iterations, h.iteration_since, schema.ITERATION_SPAN)
            k_ready, it_ready = self._ready(ks, k_since, its, i_since, now, final)
            rest = _Host()
            if not k_ready.all():
                rest.kernels.append(ks.filter(pa.array(~k_ready)))
                rest.kernel_since.append(k_since[~k_ready])
            if not it_ready.all():
                rest.iterations.append(its.filter(pa.array(~it_ready)))
                rest.iteration_since.append(i_since[~it_ready])
            if rest.kernels or rest.iterations:
                keep[host] = rest
            if k_ready.any() or it_ready.any():
                out.append((host, ks.filter(pa.array(k_ready)), its.filter(pa.array(it_ready))))
        with self._lock:  # held rows first, then what arrived meanwhile
            for host, rest in keep.items():
                cur = self._hosts.get(host)
                if cur is not None:
                    rest.kernels += cur.kernels
                    rest.kernel_since += cur.kernel_since
                    rest.iterations += cur.iterations
                    rest.iteration_since += cur.iteration_since
                self._hosts[host] = rest
        return out

    def _ready(self, ks: pa.Table, k_since: npt.NDArray[np.float64], its: pa.Table,
               i_since: npt.NDArray[np.float64], now: float,
               final: bool) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        parent = match_iterations(ks, its)
        matched = parent >= 0
        have = np.bincount(parent[matched], minlength=its.num_rows)[: its.num_rows]
        want = np.asarray(its.column("kernel_count").fill_null(0).to_numpy(), dtype=np.int64)
        it_ready = final | (have >= want) | (now - i_since >= self.hold_s)
        no_iter = np.asarray(ks.column("iteration").is_null().to_numpy(zero_copy_only=False),
                             dtype=bool)
        k_ready = final | no_iter | (~matched & (now - k_since >= self.hold_s))
        k_ready[matched] = it_ready[parent[matched]]
        excess = int((~k_ready).sum()) - self.max_rows
        if excess > 0:  # bound the backlog: release the oldest waiting rows early
            order = np.argsort(k_since, kind="stable")
            waiting = order[~k_ready[order]][:excess]
            early = np.zeros(len(k_ready), dtype=bool)
            early[waiting] = True
            it_ready[np.unique(parent[early & matched])] = True
            k_ready |= early
            k_ready[matched] = it_ready[parent[matched]]
            self.released_early += int(early.sum())
        return k_ready, it_ready

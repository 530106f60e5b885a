"""Host scoping of the shared bus: which subjects a node reads, where results go.

On a NATS shared by a fleet, every host publishes on
``aaco.v1.<signal>.<host>`` (stored as ``aaco.v1.<signal>.<host>.<p>`` when
the stream is partitioned, :class:`exporter.bus.BusConfig`). A node daemon
reads only its own host's subjects (:func:`host_subjects`), so no node
re-exports another's series; result tables computed for several hosts are
published per host (:func:`split_by_host`) so each lands on its own host's
subject.

>>> host_subjects("iteration_span", "node.a")
['aaco.v1.iteration_span.node_a']
>>> host_subjects("iteration_span", "node-a", partitions=4)
['aaco.v1.iteration_span.node-a', 'aaco.v1.iteration_span.node-a.*']
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from exporter import schema

FLEET_SIGNALS = ("analytics_result", "sched_sample", "gauge_sample", "drift_status",
                 "bottleneck", "process_info", "k8s_attribution", "generate_span")
"""The signals a Prometheus sink renders (the ``aggregate`` role subscribes to these)."""


def host_subjects(signal: str, host: str, partitions: int = 1) -> list[str]:
    """Subjects of ``signal`` published by ``host`` (sanitised into one token).

    ``aaco.v1.<signal>.<host>`` always; with ``partitions > 1`` also
    ``aaco.v1.<signal>.<host>.*``, the form the stream stores after its
    ``partition(N)`` subject transform. The two never overlap (different
    token counts), as JetStream requires of a consumer's filter subjects.
    """
    base = schema.subject(signal, host)
    return [base, f"{base}.*"] if partitions > 1 else [base]


def split_by_host(table: pa.Table, default_host: str) -> list[tuple[str, pa.Table]]:
    """Rows of ``table`` grouped by its ``host`` column, hosts sorted.

    Returns ``[(host, rows), ...]``, each host sanitised with
    :func:`exporter.schema.sanitize_token`; rows keep their order within a
    host. Rows whose host is null (and tables without a ``host`` column) go
    to ``default_host``. An empty table gives ``[]``.
    """
    if table.num_rows == 0:
        return []
    if "host" not in table.column_names:
        return [(schema.sanitize_token(default_host), table)]
    hosts = pc.fill_null(table.column("host"), default_host)
    distinct = pc.unique(hosts)
    if len(distinct) == 1:  # one host (a node's daemon): the table as it is, no filter
        return [(schema.sanitize_token(str(distinct[0].as_py())), table)]
    out: dict[str, pa.Table] = {}
    for h in sorted(set(hosts.to_pylist())):
        token = schema.sanitize_token(str(h))
        part = table.filter(pc.equal(hosts, h))
        out[token] = pa.concat_tables([out[token], part]) if token in out else part
    return sorted(out.items())

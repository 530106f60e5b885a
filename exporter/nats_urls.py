"""NATS server URLs as users give them: one, or several servers of one
cluster separated by commas (``--nats``, ``AACO_NATS_URL``), as the ``nats``
CLI and the NATS clients accept them. Kept apart from :mod:`exporter.bus` so
that the instrumentation inside a served process imports only this."""

from __future__ import annotations


def server_list(url: str) -> list[str]:
    """The servers of a comma-separated ``url`` (one cluster), in order.

    >>> server_list("nats://a:4222, nats://b:4222,")
    ['nats://a:4222', 'nats://b:4222']
    """
    return [u.strip() for u in url.split(",") if u.strip()]

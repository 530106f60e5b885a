"""The analytics checkpoint: a versioned, schema-checked envelope (no pickle).

A checkpoint is the JetStream KV value ``aaco_analytics/<durable>``: zlib of
UTF-8 JSON ::

    {"format": "aaco-analytics-checkpoint", "version": 3,
     "engine": {...}, "last_seq": int, "processed": [int, ...],
     "generation": int, "drops": {reason: int}, "verdicts": {"drift": {...}}}

(shapes: :mod:`stream_analytics.checkpoint_schema`). :func:`decode` accepts
this version and the older body without ``format``/``version`` (consumer
checkpoints written before v3, whose drift monitor is version 1 or 2) and
raises :class:`CheckpointError` for anything else: not zlib, more than
:data:`MAX_JSON_BYTES` once inflated, not JSON, another ``format``, a
newer ``version``, a field of the wrong type or range, or a v1/v2
Page-Hinkley/ADWIN state (a base64 pickle, refused without being decoded).
Nothing in a checkpoint is ever executed or imported.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stream_analytics.checkpoint_schema import SchemaError, check_state

if TYPE_CHECKING:
    from stream_analytics.engine import Analytics
    from stream_analytics.verdicts import OnlineVerdicts

FORMAT = "aaco-analytics-checkpoint"
VERSION = 3
MAX_JSON_BYTES = 256 * 1024 * 1024
"""Inflated size limit (bytes): a zlib bomb is refused, not inflated."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded (corrupt, foreign or too new)."""


def encode(state: Mapping[str, Any]) -> bytes:
    """zlib(JSON) of the envelope around ``state`` (the consumer's fields)."""
    body = {"format": FORMAT, "version": VERSION, **state}
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode())


def _inflate(raw: bytes) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(raw, MAX_JSON_BYTES)
    except zlib.error as e:
        raise CheckpointError(f"not zlib data: {e}") from None
    if d.unconsumed_tail or not d.eof:
        raise CheckpointError(f"truncated or larger than {MAX_JSON_BYTES} bytes inflated")
    return out


def decode(raw: bytes | None) -> dict[str, Any]:
    """The checked body of a checkpoint (``format``/``version`` removed).

    Raises :class:`CheckpointError` (see the module doc); never unpickles,
    imports or calls anything named in ``raw``.
    """
    if not isinstance(raw, bytes | bytearray) or not raw:
        raise CheckpointError("empty checkpoint")
    try:
        doc = json.loads(_inflate(bytes(raw)))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise CheckpointError("not a JSON object")
    if "format" in doc or "version" in doc:
        if doc.get("format") != FORMAT:
            raise CheckpointError(f"foreign format {str(doc.get('format'))[:64]!r}")
        v = doc.get("version")
        if not isinstance(v, int) or isinstance(v, bool) or v < VERSION:
            raise CheckpointError(f"bad version {str(v)[:32]!r}")
        if v > VERSION:
            raise CheckpointError(f"version {v} is newer than this exporter's {VERSION}")
    try:
        st = check_state(doc, ("format", "version"))
    except (SchemaError, RecursionError) as e:
        raise CheckpointError(str(e)) from None
    st.pop("format", None)
    st.pop("version", None)
    return st


def restore(raw: bytes | None) -> tuple[dict[str, Any], Analytics, OnlineVerdicts]:
    """:func:`decode`, then the engine and the verdicts loaded from it: what the
    consumer resumes from.

    Raises :class:`CheckpointError` as :func:`decode` does, and also (naming the
    section) for values of the right shape that a loader refuses: a detector
    parameter out of its range, ADWIN bucket summaries that break their invariants,
    held kernels that are not base64 Arrow IPC."""
    import pyarrow as pa

    from stream_analytics.engine import Analytics
    from stream_analytics.verdicts import OnlineVerdicts

    st = decode(raw)
    try:
        engine = Analytics.from_dict(st["engine"])
    except (ValueError, pa.ArrowException) as e:  # binascii.Error is a ValueError
        raise CheckpointError(f"engine: refused by its loader: {str(e)[:200]}") from None
    try:
        verdicts = (OnlineVerdicts.from_dict(st["verdicts"]) if "verdicts" in st
                    else OnlineVerdicts())
    except ValueError as e:
        raise CheckpointError(f"verdicts.drift: refused by its loader: {str(e)[:200]}") from None
    return st, engine, verdicts

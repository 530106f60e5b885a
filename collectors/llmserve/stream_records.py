"""Per-request token-stream recordings of an LLM server -> generate records.

Input: JSON Lines, one streamed request per line, as an OpenAI-compatible
streaming load client writes them (the format of the public
``inference-engineering-in-practice`` lab's ``load.py``; a real file is in
``collectors/llmserve/testdata``). Fields read (times in seconds on the
client's monotonic clock):

* ``sent``: when the request was sent;
* ``text_chunk_times``: ascending arrival times of the streamed chunks that
  carried text (the role-only and final chunks are not in it);
* ``output_tokens``: completion tokens of the request (the server's usage
  count); when null, ``timings.predicted_n``; when both are null, one token
  per chunk;
* ``error``: null, or the client's error text;
* ``id``: the request number; ``timings``: llama.cpp's server timings object
  (``prompt_n``, ``prompt_ms``, ``predicted_n``, ``predicted_ms``) or null.

Mapping onto :class:`exporter.instrument.llm.GenerateRecord` (ns, rounded):
start = ``sent``, token steps = ``text_chunk_times``, end = the last chunk
(``sent`` when there is none). A chunk may carry several tokens (a server
coalesces them under load); the file says how many in total, not which
chunk, so each step counts 1 and the surplus is put on the last step: the
call's tokens, tokens/s and TTFT do not depend on where it goes. A request
with fewer tokens than chunks is an error (``ValueError``).

Errors: a line that is not a JSON object, or lacks a field, raises
``ValueError`` naming ``file:line`` and the field.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from exporter.instrument.llm import GenerateRecord

SERVER = pa.schema([
    ("generate_id", pa.int64()), ("prompt_tokens", pa.int64()),
    ("prompt_s", pa.float64()),  # llama.cpp timings.prompt_ms / 1000
    ("predicted_tokens", pa.int64()),
    ("predicted_s", pa.float64()),  # timings.predicted_ms / 1000
])


@dataclass(frozen=True)
class StreamFile:
    """``records``: one generate record per line, in file order;
    ``server``: :data:`SERVER` rows of the lines with a ``timings`` object."""

    records: list[GenerateRecord]
    server: pa.Table


def _ns(x: Any, where: str, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{where}: field {name!r} is not a number: {x!r}")
    return round(float(x) * 1e9)


def _record(obj: dict[str, Any], where: str, model: str) -> GenerateRecord:
    for name in ("sent", "text_chunk_times"):
        if name not in obj:
            raise ValueError(f"{where}: missing field {name!r}")
    chunks = obj["text_chunk_times"]
    if not isinstance(chunks, list):
        raise ValueError(f"{where}: field 'text_chunk_times' is not a list")
    start = _ns(obj["sent"], where, "sent")
    steps = [_ns(t, where, "text_chunk_times") for t in chunks]
    if any(b < a for a, b in itertools.pairwise(steps)) or (steps and steps[0] < start):
        raise ValueError(f"{where}: 'text_chunk_times' not ascending from 'sent'")
    timings = obj.get("timings") or {}
    total = obj.get("output_tokens")
    if total is None:
        total = timings.get("predicted_n", len(steps))
    if not isinstance(total, int) or total < len(steps):
        raise ValueError(f"{where}: field 'output_tokens' {total!r} < {len(steps)} text chunks")
    tokens = [1] * len(steps)
    if steps:
        tokens[-1] += total - len(steps)
    err = obj.get("error")
    return GenerateRecord(
        generate_id=int(obj.get("id", 0)), model=model, batch_size=1, pid=0, tid=0,
        start_ns=start, end_ns=steps[-1] if steps else start, step_ns=steps,
        step_tokens=tokens, error=None if err is None else str(err))


def read_stream_file(path: str | Path, model: str | None = None) -> StreamFile:
    """Parse ``path`` (see the module docstring); ``model`` labels every
    record (default: the file name up to its first ``.``)."""
    p = Path(path)
    label = model or p.name.split(".", 1)[0]
    recs: list[GenerateRecord] = []
    server: list[dict[str, Any]] = []
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON: {e.msg}") from e
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: not a JSON object")
            r = _record(obj, where, label)
            recs.append(r)
            t = obj.get("timings")
            if isinstance(t, dict):
                try:
                    server.append({
                        "generate_id": r.generate_id, "prompt_tokens": int(t["prompt_n"]),
                        "prompt_s": float(t["prompt_ms"]) / 1000,
                        "predicted_tokens": int(t["predicted_n"]),
                        "predicted_s": float(t["predicted_ms"]) / 1000})
                except (KeyError, TypeError, ValueError) as e:
                    raise ValueError(f"{where}: bad 'timings' object: {e!r}") from e
    return StreamFile(recs, pa.Table.from_pylist(server, schema=SERVER))

"""Shared by the GPU parser tests: the rows of a parse as a comparable dict."""

from __future__ import annotations

from collectors.gpu import rows as R

SUB = ("hw.gpu.task", "sensor", "clock", "type", "reason")
"""Attributes that tell the series of one metric apart (the first present is used)."""

Key = tuple[int | None, str, str]


def readings(res: R.ParseResult, gpu: int | None = None) -> dict[Key, float]:
    """{(gpu_index, metric, distinguishing attribute): value} of the rows (of GPU
    ``gpu`` only, when given); a reading seen twice fails the calling test."""
    out: dict[Key, float] = {}
    for r in res.rows:
        if gpu is not None and r.gpu_index != gpu:
            continue
        sub = next((v for k in SUB if (v := r.attr(k)) is not None), "")
        key = (r.gpu_index, r.metric, sub)
        assert key not in out, f"duplicate reading {key}"
        out[key] = r.value
    return out

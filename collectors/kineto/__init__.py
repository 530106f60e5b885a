"""``kineto`` collector: kernel and iteration spans from the Kineto (PyTorch
profiler) traces an inference server writes, live.

Options (``sample.toml``): ``dir`` (required; e.g. vLLM's
``VLLM_TORCH_PROFILER_DIR``), ``interval_s`` (poll period, default 1.0),
``settle_s`` (seconds a file's size and mtime must stay unchanged before it
counts as complete, default 2.0), ``model`` (model label; default the trace
file name up to its first ``.``, else ``"pytorch"``). See ``README.md`` in
this folder and ``docs/kineto.md``.

The parser is :func:`collectors.rocprof.jsonfmt.kineto_emits` (shared with
``replay``); the directory logic is
:class:`collectors.kineto.follow.TraceDirFollower`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar

from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.kineto.follow import TraceDirFollower
from collectors.rocprof.rejects import Rejects


@register("kineto")
class KinetoCollector:
    """Follows ``options["dir"]``; emits ``kernel_span`` and ``iteration_span``.

    Raises ``ValueError`` at construction when ``dir`` is missing or an
    option is not a number; never raises from :meth:`collect` (bad files go
    to :meth:`drops`)."""

    name = "kineto"
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "dir": str, "interval_s": float, "settle_s": float, "model": str}
    """Config keys (``[collectors.kineto]``) and their types; see ``sample.toml``."""
    source = "kineto"

    def __init__(self, ctx: CollectorContext) -> None:
        if not ctx.options.get("dir"):
            raise ValueError("kineto collector: option 'dir' (Kineto trace directory) is required")
        self.ctx = ctx
        try:
            self.interval_s = float(ctx.options.get("interval_s", 1.0))
            settle_s = float(ctx.options.get("settle_s", 2.0))
        except (TypeError, ValueError) as e:
            raise ValueError(f"kineto collector: interval_s/settle_s must be numbers: {e}") from e
        model = ctx.options.get("model")
        self.rejects = Rejects()
        self.follower = TraceDirFollower(Path(str(ctx.options["dir"])), self.rejects,
                                         settle_s=settle_s, model=str(model) if model else None,
                                         log=ctx.log)

    def collect(self) -> Iterable[Emit]:
        """Kernel and iteration spans of the trace files completed since the last call."""
        return self.follower.poll()

    def drops(self) -> dict[str, int]:
        """Dropped files/rows so far, per reason token (``bad_json``, ``io_error``...)."""
        return dict(self.rejects.counts)

    def close(self) -> None:
        return None

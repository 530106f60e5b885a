"""``ort`` collector: run a real ONNX model under ONNX Runtime and profile it.

Each ``collect()`` creates a profiling ``InferenceSession``, runs the model
for ``chunk_s`` seconds or ``chunk_iterations`` runs (whichever comes first),
ends profiling and turns ORT's own profile into kernel spans (one per
executed node) and iteration spans (one per run). A new session per chunk is
needed because ORT cannot restart profiling on a session; the first run of
each session is a warm-up and is not published (``warmup`` more are skipped
on the first chunk). The first call also publishes the model's graph info.

Publish order inside a chunk is graph info, kernel spans, iteration spans:
the analytics consumer relies on a run's kernels arriving before its span.
See README.md in this folder for options.

``onnxruntime`` (the ``ort`` extra, or ``rocm`` / ``migraphx``) is imported
when a model is run or providers are listed, not when the registry loads
this plugin: :func:`onnxruntime` raises
:class:`~exporter.extras.MissingExtra` without it.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.ort.graph import Graph, ModelError, load_graph
from collectors.ort.inputs import InputError, make_inputs
from collectors.ort.profile import Profile, parse_profile
from exporter.extras import require

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["InputError", "ModelError", "OrtCollector", "resolve_model"]

MODEL_ALIASES = {
    "magika": ("magika", "models/standard_v3_3/model.onnx"),
}
"""Real models shipped inside PyPI packages, by short name."""


def resolve_model(spec: str) -> Path:
    """A path, or an alias of :data:`MODEL_ALIASES` (e.g. ``magika``)."""
    if spec in MODEL_ALIASES:
        pkg, rel = MODEL_ALIASES[spec]
        import importlib.util

        found = importlib.util.find_spec(pkg)
        if found is None or found.origin is None:
            raise ModelError(f"model alias {spec!r} needs the {pkg!r} package: pip install {pkg}")
        return Path(found.origin).parent / rel
    return Path(spec)


def onnxruntime() -> Any:
    """The ``onnxruntime`` module; :class:`~exporter.extras.MissingExtra` (an
    ``ImportError``) naming the ``ort`` extra when it is not installed."""
    return require("onnxruntime", "ort", "running an ONNX model (--model)")


PREFERRED_PROVIDERS = (
    "MIGraphXExecutionProvider",
    "ROCMExecutionProvider",
    "CUDAExecutionProvider",
    "CPUExecutionProvider",
)


def best_providers() -> list[str]:
    """Available execution providers in order of preference, CPU last."""
    have = set(onnxruntime().get_available_providers())
    return [p for p in PREFERRED_PROVIDERS if p in have] or ["CPUExecutionProvider"]


GPU_EXTRAS = {"ROCMExecutionProvider": "rocm", "MIGraphXExecutionProvider": "migraphx"}
"""Execution providers of AMD GPUs and the aaco-exporter extra that brings each
(``onnxruntime-rocm``, ``onnxruntime-migraphx``)."""


def check_providers(wanted: list[str] | None) -> list[str]:
    """``wanted`` (or :func:`best_providers`) after checking each is available.

    Raises :class:`ModelError` naming an unavailable provider, the available
    ones and, for an AMD GPU provider, the extra that installs it.
    """
    if not wanted:
        return best_providers()
    have = onnxruntime().get_available_providers()
    for p in wanted:
        if p not in have:
            hint = (f"; install aaco-exporter[{GPU_EXTRAS[p]}] (see docs/execution-providers.md)"
                    if p in GPU_EXTRAS else "")
            raise ModelError(f"execution provider {p!r} is not available in this onnxruntime "
                             f"(available: {', '.join(have)}){hint}")
    return list(wanted)


def gpu_present(dev: Path = Path("/dev/kfd"), drm: Path = Path("/sys/class/drm")) -> bool:
    """An AMD GPU is visible: ``/dev/kfd`` exists or a DRM card has vendor 0x1002."""
    if dev.exists():
        return True
    try:
        return any((c / "device/vendor").read_text().strip() == "0x1002"
                   for c in drm.glob("card[0-9]*") if (c / "device/vendor").exists())
    except OSError:
        return False


def cpu_only_warning(providers: list[str], gpu: bool) -> str | None:
    """The one-line warning when a GPU is present but only the CPU provider runs.

    >>> cpu_only_warning(["CPUExecutionProvider"], gpu=True)[:29]
    'an AMD GPU is present but ONN'
    >>> cpu_only_warning(["ROCMExecutionProvider"], gpu=True) is None
    True
    """
    if gpu and providers == ["CPUExecutionProvider"]:
        return ("an AMD GPU is present but ONNX Runtime runs on CPUExecutionProvider only; "
                "install aaco-exporter[rocm] or [migraphx] and pass --providers "
                "(docs/execution-providers.md)")
    return None


class ModelRunner:
    """Runs one model with profiling, chunk by chunk, in this process."""

    def __init__(
        self,
        graph: Graph,
        *,
        providers: list[str] | None = None,
        dims: Mapping[str, int] | None = None,
        fill: Mapping[str, float] | None = None,
        intra_op_threads: int = 0,
        profile_dir: Path | None = None,
    ) -> None:
        self.graph = graph
        self.providers = check_providers(providers)
        self.intra_op_threads = intra_op_threads
        self._tmp = tempfile.TemporaryDirectory(prefix="aaco-ort-")
        self.profile_dir = profile_dir or Path(self._tmp.name)
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        self.keep_profiles = profile_dir is not None
        self.next_iteration = 0
        self.chunks: list[tuple[Path, int, int, int]] = []
        """Kept profiles: ``(path, profiling start ns, warm-up runs, first iteration)``."""
        sess = self._session(profiling=False)
        self.feed = make_inputs(sess.get_inputs(), dims, fill)
        try:
            sess.run(None, self.feed)
        except Exception as e:  # ORT raises its own Fail/InvalidArgument types
            raise InputError(f"{graph.path}: the model rejected generated inputs: {e}") from None
        self.provider = sess.get_providers()[0]

    def session_options(self) -> ort.SessionOptions:
        """The ``onnxruntime.SessionOptions`` every session of this runner gets
        (before profiling)."""
        ort = onnxruntime()
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.intra_op_threads
        return so

    def _session(self, profiling: bool) -> ort.InferenceSession:
        ort = onnxruntime()
        so = self.session_options()
        if profiling:
            so.enable_profiling = True
            so.profile_file_prefix = str(self.profile_dir / f"ort_profile_{uuid.uuid4().hex[:8]}")
        return ort.InferenceSession(str(self.graph.path), so, providers=self.providers)

    def run_chunk(self, max_iterations: int, max_seconds: float, warmup: int = 1) -> Profile:
        """Run up to ``max_iterations`` measured runs (after ``warmup``)."""
        sess = self._session(profiling=True)
        start_ns = int(sess.get_profiling_start_time_ns())
        for _ in range(warmup):
            sess.run(None, self.feed)
        deadline = time.monotonic() + max_seconds
        n = 0
        while n < max_iterations and (n == 0 or time.monotonic() < deadline):
            sess.run(None, self.feed)
            n += 1
        path = Path(sess.end_profiling())
        prof = parse_profile(
            path,
            start_ns=start_ns,
            model=self.graph.name,
            first_iteration=self.next_iteration,
            skip_runs=warmup,
        )
        if not self.keep_profiles:
            path.unlink(missing_ok=True)
        else:
            self.chunks.append((path, start_ns, warmup, self.next_iteration))
        self.next_iteration += prof.iterations.num_rows
        return prof

    def close(self) -> None:
        self._tmp.cleanup()


@register("ort")
class OrtCollector:
    """Options: ``model`` (path or alias), ``model_name``, ``iterations``
    (total, 0 = forever), ``warmup``, ``chunk_s``, ``chunk_iterations``,
    ``providers``, ``dims``, ``fill``, ``intra_op_threads``, ``profile_dir``.
    """

    name = "ort"
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "model": str, "model_name": str, "profile_dir": str, "providers": list, "dims": dict,
        "fill": dict, "intra_op_threads": int, "iterations": int, "warmup": int, "chunk_s": float,
        "chunk_iterations": int, "interval_s": float}
    """Config keys (``[collectors.ort]``) and their types; see ``sample.toml``."""

    def __init__(self, ctx: CollectorContext) -> None:
        o: Mapping[str, Any] = ctx.options
        self.ctx = ctx
        self.interval_s = float(o.get("interval_s", 0.0))
        self.graph = load_graph(resolve_model(str(o["model"])), o.get("model_name"))
        pdir = o.get("profile_dir")
        self.runner = ModelRunner(
            self.graph,
            providers=o.get("providers"),
            dims=o.get("dims"),
            fill=o.get("fill"),
            intra_op_threads=int(o.get("intra_op_threads", 0)),
            profile_dir=Path(pdir) if pdir else None,
        )
        self.source = self.runner.provider
        warning = cpu_only_warning(self.runner.providers, gpu_present())
        if warning:
            ctx.log(f"ort: {warning}")
        self.total = int(o.get("iterations", 0))
        self.warmup = int(o.get("warmup", 1))
        self.chunk_s = float(o.get("chunk_s", 1.0))
        self.chunk_iterations = int(o.get("chunk_iterations", 1000))
        self.pid = os.getpid()
        ctx.pids.add(self.pid)
        self._run = f"ort-{ctx.host}-{self.pid}-{uuid.uuid4().hex[:8]}"
        self._chunk = 0
        self.done = False

    def collect(self) -> Iterable[Emit]:
        if self.done:
            return []
        out: list[Emit] = []
        if self._chunk == 0:
            out.append(Emit("graph_info", self.graph.info_table(self.pid), f"{self._run}:graph"))
        left = self.total - self.runner.next_iteration if self.total else self.chunk_iterations
        warm = self.warmup if self._chunk == 0 else 1
        prof = self.runner.run_chunk(min(left, self.chunk_iterations), self.chunk_s, warm)
        key = f"{self._run}:{self._chunk}"
        out.append(Emit("kernel_span", prof.kernels, f"{key}:k"))
        out.append(Emit("iteration_span", prof.iterations, f"{key}:i"))
        self._chunk += 1
        if self.total and self.runner.next_iteration >= self.total:
            self.done = True
        return out

    def close(self) -> None:
        self.ctx.pids.discard(self.pid)
        self.runner.close()

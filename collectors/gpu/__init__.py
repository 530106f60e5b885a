"""``gpu`` collector: GPU gauges in base units from amdsmi, amd-smi, rocm-smi,
sysfs or NVML. See ``README.md`` in this folder and ``docs/gpu-gauges.md``.

Options (``ctx.options``):

=============  ===========  =================================================
key            default      meaning
=============  ===========  =================================================
source         ``auto``     ``auto|amdsmi|amd-smi|rocm-smi|sysfs|nvml``
interval_s     ``1.0``      poll period, seconds
timeout_s      ``2.0``      limit on every CLI call, seconds
sysfs_root     ``/sys``     root of the sysfs tree (tests use a synthetic one)
amd_smi        ``amd-smi``  amd-smi executable
rocm_smi       ``rocm-smi`` rocm-smi executable
=============  ===========  =================================================

``auto`` tries, in order: the amdsmi library, ``amd-smi`` on PATH,
``rocm-smi`` on PATH, sysfs amdgpu cards, NVML; the choice is logged once
and kept in ``self.source`` (``"none"`` when nothing is present, in which case
``collect()`` returns ``[]``). ``self.drops`` counts dropped readings and
failed polls by reason: ``bad_value``, ``bad_json``, ``bad_shape``,
``cli_timeout``, ``cli_exit``, ``cli_missing``, ``read_error``.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Protocol

from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.gpu import amd_smi, amdsmi_lib, nvml, rocm_smi, sysfs
from collectors.gpu import rows as R
from collectors.gpu.runner import CliError, run_cli
from collectors.gpu.throttle import ResidencyTracker

SOURCES = ("amdsmi", "amd-smi", "rocm-smi", "sysfs", "nvml")

ROCM_SMI_ARGS = [
    "--showid",
    "--showproductname",
    "--showuniqueid",
    "--showserial",
    "--showtemp",
    "--showpower",
    "--showmaxpower",
    "--showclocks",
    "--showuse",
    "--showmemuse",
    "--showmeminfo",
    "vram",
    "--showreplaycount",
    "--showenergycounter",
    "--showmetrics",
    "--json",
]
"""Flags of the ``rocm-smi`` call (one JSON document with every gauge).

``--showmetrics`` prints the ``gpu_metrics`` table: ``throttle_status`` (the
only throttle reading rocm-smi has), ``current_gfxclk``/``current_uclk``.
A rocm-smi without that flag (argparse: "unrecognized arguments") is called
again without it, once, and from then on; see :class:`RocmSmiCliBackend`."""


class Backend(Protocol):
    """One source: ``read()`` returns the current rows (may raise)."""

    source: str

    def read(self) -> R.ParseResult: ...


class AmdsmiBackend:
    """amdsmi Python library."""

    source = "amdsmi"

    def __init__(self, module: str = "amdsmi") -> None:
        self.mod, self.handles = amdsmi_lib.open_library(module)

    def read(self) -> R.ParseResult:
        return amdsmi_lib.read_library(self.mod, self.handles)


class AmdSmiCliBackend:
    """``amd-smi metric --json`` each poll, ``amd-smi static --json`` once.

    ``static`` gives identity (model, uuid, partitions) and the power cap and
    VRAM size, which fill in when ``metric`` does not report them.
    """

    source = "amd-smi"

    def __init__(
        self, exe: str, timeout_s: float, run: Callable[[list[str], float], str] = run_cli
    ) -> None:
        self.exe, self.timeout_s, self.run = exe, timeout_s, run
        self.devices: dict[int, R.Device] | None = None
        self._static_rows: list[R.Row] = []

    def read(self) -> R.ParseResult:
        res = R.ParseResult()
        if self.devices is None:  # identity + limits, best effort, once
            self.devices = {}
            try:
                self.devices, static = amd_smi.parse_static(
                    self.run([self.exe, "static", "--json"], self.timeout_s)
                )
                self._static_rows = [
                    r for r in static.rows if r.metric in (R.POWER_LIMIT, R.MEMORY_LIMIT)
                ]
            except (CliError, R.ParseError) as e:
                res.drop(e.reason, str(e))
        try:
            text = self.run([self.exe, "metric", "--json"], self.timeout_s)
            res.extend(amd_smi.parse_metric(text, self.devices))
        except (CliError, R.ParseError) as e:
            res.drop(e.reason, str(e))
            return res
        have = {(r.metric, r.gpu_index) for r in res.rows}
        res.rows.extend(r for r in self._static_rows if (r.metric, r.gpu_index) not in have)
        return res


class RocmSmiCliBackend:
    """``rocm-smi <ROCM_SMI_ARGS>`` each poll."""

    source = "rocm-smi"

    def __init__(
        self, exe: str, timeout_s: float, run: Callable[[list[str], float], str] = run_cli
    ) -> None:
        self.exe, self.timeout_s, self.run = exe, timeout_s, run
        self.args = list(ROCM_SMI_ARGS)
        self.note: str | None = None  # why a flag was dropped, for the collector's log

    def read(self) -> R.ParseResult:
        """One poll. A rocm-smi that rejects ``--showmetrics`` (older releases) is
        asked again without it; ``note`` then says that throttle readings are lost."""
        try:
            out = self.run([self.exe, *self.args], self.timeout_s)
        except CliError as e:
            if not (e.reason == "cli_exit" and "--showmetrics" in self.args
                    and "unrecognized arguments" in str(e)):  # fmt: skip
                raise
            self.args.remove("--showmetrics")
            self.note = (f"{self.exe} has no --showmetrics: no throttle_status, so no "
                         "hw.gpu.throttled readings from this source")  # fmt: skip
            out = self.run([self.exe, *self.args], self.timeout_s)
        return rocm_smi.parse_rocm_smi(out)


class SysfsBackend:
    """amdgpu sysfs files under ``root``."""

    source = "sysfs"

    def __init__(self, root: str) -> None:
        self.root = root
        if not sysfs.amd_cards(root):
            raise RuntimeError(f"sysfs: no amdgpu card under {root}/class/drm")

    def read(self) -> R.ParseResult:
        return sysfs.read_sysfs(self.root)


class NvmlBackend:
    """NVIDIA NVML through pynvml."""

    source = "nvml"

    def __init__(self, module: str = "pynvml") -> None:
        self.mod, self.handles = nvml.open_nvml(module)

    def read(self) -> R.ParseResult:
        return nvml.read_nvml(self.mod, self.handles)


def _build(name: str, opts: dict[str, Any]) -> Backend:
    """Build backend ``name`` or raise ``RuntimeError`` saying why it is absent."""
    timeout = float(opts.get("timeout_s", 2.0))
    if name == "amdsmi":
        return AmdsmiBackend(str(opts.get("amdsmi_module", "amdsmi")))
    if name == "amd-smi":
        exe = str(opts.get("amd_smi", "amd-smi"))
        if shutil.which(exe) is None:
            raise RuntimeError(f"amd-smi: {exe!r} not found on PATH")
        return AmdSmiCliBackend(exe, timeout)
    if name == "rocm-smi":
        exe = str(opts.get("rocm_smi", "rocm-smi"))
        if shutil.which(exe) is None:
            raise RuntimeError(f"rocm-smi: {exe!r} not found on PATH")
        return RocmSmiCliBackend(exe, timeout)
    if name == "sysfs":
        return SysfsBackend(str(opts.get("sysfs_root", "/sys")))
    if name == "nvml":
        return NvmlBackend(str(opts.get("nvml_module", "pynvml")))
    raise RuntimeError(f"unknown source {name!r}; known: auto, {', '.join(SOURCES)}")


def detect(opts: dict[str, Any]) -> tuple[Backend | None, list[str]]:
    """The first available backend for ``opts['source']`` and why others failed."""
    wanted = str(opts.get("source", "auto"))
    order = SOURCES if wanted == "auto" else (wanted,)
    why: list[str] = []
    for name in order:
        try:
            return _build(name, opts), why
        except RuntimeError as e:
            why.append(str(e))
    return None, why


@register("gpu")
class GpuCollector:
    """Publishes one ``gauge_sample`` batch per poll (all GPUs, base units)."""

    name = "gpu"
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "source": str, "interval_s": float, "timeout_s": float, "sysfs_root": str, "amd_smi": str,
        "rocm_smi": str, "amdsmi_module": str, "nvml_module": str}
    """Config keys (``[collectors.gpu]``) and their types; see ``sample.toml``."""

    def __init__(self, ctx: CollectorContext, backend: Backend | None = None) -> None:
        self.ctx = ctx
        opts = dict(ctx.options)
        self.interval_s = float(opts.get("interval_s", 1.0))
        self.drops: collections.Counter[str] = collections.Counter()
        """Dropped readings / failed polls by bounded reason token."""
        self._tracker = ResidencyTracker()
        self._tables = R.TableCache()
        self._seq = itertools.count()
        self._run = f"gpu-{ctx.host}-{uuid.uuid4().hex[:12]}"
        if backend is None:
            backend, why = detect(opts)
        else:
            why = []
        self._backend = backend
        self.source = backend.source if backend is not None else "none"
        if backend is None:
            ctx.log(f"gpu: no GPU source found ({'; '.join(why)}); collector idle")
        else:
            ctx.log(f"gpu: using source {self.source}")

    def _count(self, reason: str, message: str) -> None:
        self.drops[reason] += 1
        n = self.drops[reason]
        if n & (n - 1) == 0 or n % 1000 == 0:  # 1st, 2nd, 4th, ... time: bounded logging
            self.ctx.log(f"gpu: drop {reason} (#{n}): {message}")

    def collect(self) -> Iterable[Emit]:
        """Rows of every GPU now; ``[]`` when idle or the poll failed. Never raises."""
        if self._backend is None:
            return []
        ts = time.time_ns()
        try:
            res = self._backend.read()
        except (CliError, R.ParseError) as e:
            self._count(e.reason, str(e))
            return []
        except Exception as e:  # a backend bug must not kill the daemon
            self._count("read_error", f"{type(e).__name__}: {e}")
            return []
        note = getattr(self._backend, "note", None)
        if note:  # once: the backend had to drop a flag its tool does not know
            self.ctx.log(f"gpu: {note}")
            self._backend.note = None  # type: ignore[attr-defined]
        for reason, msg in res.errors:
            self._count(reason, msg)
        rows = res.rows + self._tracker.ratios(res.rows)
        if not rows:
            return []
        table = self._tables.build(rows, ts_ns=ts, source=self.source)
        return [Emit("gauge_sample", table, f"{self._run}:{next(self._seq)}")]

    def close(self) -> None:
        """Shut the library down when one was opened."""
        mod = getattr(self._backend, "mod", None)
        for fn in ("amdsmi_shut_down", "nvmlShutdown"):
            f = getattr(mod, fn, None)
            if callable(f):
                with contextlib.suppress(Exception):
                    f()

"""``aaco-exporter calibrate``: this host's ceilings, measured by microbenchmarks.

Figures (each with every repetition, the median and the spread):

``gemm_float32`` / ``gemm_float64``
    ``numpy.matmul`` of two ``n x n`` matrices, ``2 n^3`` FLOP per product, in
    FLOP/s. ``n`` (default 2048) makes the product compute-bound: its
    arithmetic intensity is ``n / 6`` FLOP/byte for float64, far above any
    CPU's ridge point. numpy runs it on its BLAS (``blas`` in the file) with
    the BLAS's own thread count.
``stream_copy`` / ``stream_triad``
    STREAM-like kernels in bytes/s over float64 arrays of ``stream_bytes``
    each (default: 4x the last-level cache, at least 64 MiB) so that every
    pass goes to DRAM. Bytes are counted the STREAM way: copy ``b = a`` moves
    16 bytes per element, triad ``a = b + s*c`` 24. numpy evaluates the triad
    in two passes (``a = s*c``; ``a += b``) that really move 40 bytes per
    element, so the STREAM-convention triad figure understates the bus by up
    to 40 %; ``memory_bandwidth`` therefore takes the larger of the two.

Ceilings (``ceilings`` in the file): ``cpu_peak_flops_float32`` /
``cpu_peak_flops_float64`` (FLOP/s, the GEMM medians) and
``cpu_memory_bandwidth`` (bytes/s, the larger STREAM median); ``gpu_*`` when
the GPU leg ran. The GPU leg uses the GPU's own libraries through ``torch``
(ROCm or CUDA builds) or ``cupy``; when neither is importable, or neither sees
a device, it is skipped and ``gpu.skipped`` says why in one line.

Where: ``--calibration FILE``, else ``$AACO_CALIBRATION``, else
``$XDG_CACHE_HOME/aaco-exporter/calibration.json`` (``~/.cache/…``). A file
for another host or CPU model, or of another format version, is remeasured.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "aaco-calibration"
VERSION = 1


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message names the file and why."""


@dataclass
class CalibrateOptions:
    """Sizes and repetitions; the defaults keep a run under ~30 s on 2 cores."""

    gemm_n: int = 2048
    gemm_reps: int = 5
    stream_bytes: int | None = None  # per array; None: 4x LLC, >= 64 MiB
    stream_reps: int = 5
    gpu: bool = True


def default_path() -> Path:
    """``$AACO_CALIBRATION``, else ``$XDG_CACHE_HOME/aaco-exporter/calibration.json``."""
    env = os.environ.get("AACO_CALIBRATION")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "aaco-exporter" / "calibration.json"


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first ``model name`` of ``/proc/cpuinfo`` (``platform.processor()`` if none)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, sep, val = line.partition(":")
            if sep and key.strip() == "model name":
                return val.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def llc_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Size in bytes of cpu0's highest-level data/unified cache (sysfs), or None."""
    best: tuple[int, int] | None = None
    for d in sorted(root.glob("index*")):
        try:
            level = int((d / "level").read_text())
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        n = int(size.rstrip("KMG")) * mult
        if best is None or level > best[0]:
            best = (level, n)
    return None if best is None else best[1]


def blas_info() -> dict[str, Any]:
    """numpy's version and BLAS/LAPACK build config (``numpy.show_config``)."""
    info: dict[str, Any] = {"numpy": np.__version__}
    try:
        cfg: Any = np.show_config(mode="dicts")  # type: ignore[no-untyped-call, func-returns-value, unused-ignore]
        deps = cfg.get("Build Dependencies", {})
        for k in ("blas", "lapack"):
            d = deps.get(k) or {}
            info[k] = {f: d.get(f) for f in ("name", "version", "openblas configuration")
                       if d.get(f) is not None}
    except (TypeError, AttributeError):  # numpy < 1.25
        pass
    info["threads_env"] = {k: os.environ[k] for k in (
        "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}
    return info


def summarise(values: list[float], unit: str, **meta: Any) -> dict[str, Any]:
    """A figure: its repetitions, median, min, max and relative spread
    ``(max - min) / median`` (0 for one repetition)."""
    med = statistics.median(values)
    return {"unit": unit, "repetitions": values, "median": med, "min": min(values),
            "max": max(values), "spread_ratio": (max(values) - min(values)) / med if med else None,
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0, **meta}


def _timed(fn: Callable[[], object], reps: int) -> list[float]:
    fn()  # warm-up: page faults, BLAS thread start
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def gemm(n: int, dtype: type[np.floating[Any]], reps: int) -> dict[str, Any]:
    """FLOP/s of ``a @ b`` for ``n x n`` matrices of ``dtype``."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    c = np.empty((n, n), dtype=dtype)
    flop = 2.0 * n ** 3
    secs = _timed(lambda: np.matmul(a, b, out=c), reps)
    return summarise([flop / s for s in secs], "FLOP/s", n=n, dtype=np.dtype(dtype).name,
                     flop_per_repetition=flop)


def stream(nbytes: int, reps: int) -> dict[str, dict[str, Any]]:
    """STREAM copy and triad bandwidth (bytes/s, STREAM byte counts) over
    float64 arrays of ``nbytes`` each."""
    n = max(1, nbytes // 8)
    a = np.zeros(n)
    b = np.full(n, 1.0)
    c = np.full(n, 2.0)
    s = 3.0

    def triad() -> None:
        np.multiply(c, s, out=a)
        np.add(a, b, out=a)

    copy_s = _timed(lambda: np.copyto(a, b), reps)
    triad_s = _timed(triad, reps)
    meta = {"array_bytes": n * 8, "dtype": "float64"}
    return {
        "stream_copy": summarise([16.0 * n / t for t in copy_s], "bytes/s",
                                 bytes_per_element=16, **meta),
        "stream_triad": summarise([24.0 * n / t for t in triad_s], "bytes/s",
                                  bytes_per_element=24, passes=2, **meta),
    }


def gpu_leg(n: int, reps: int) -> dict[str, Any]:
    """GEMM and copy bandwidth on the first GPU through torch or cupy, or
    ``{"skipped": why}`` (one line) when neither library or no device is there."""
    if importlib.util.find_spec("torch") is not None:
        import torch  # type: ignore[import-not-found, unused-ignore]

        if not torch.cuda.is_available():
            return {"skipped": "torch is installed but sees no GPU (torch.cuda.is_available() "
                               "is False)"}
        dev = torch.device("cuda")
        out: dict[str, Any] = {"library": f"torch {torch.__version__}",
                               "device": torch.cuda.get_device_name(0)}

        def sync_timed(fn: Callable[[], object]) -> list[float]:
            fn()
            torch.cuda.synchronize()
            res = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                res.append(time.perf_counter() - t0)
            return res

        for dt, name in ((torch.float32, "float32"), (torch.float16, "float16")):
            a = torch.randn(n, n, device=dev, dtype=dt)
            b = torch.randn(n, n, device=dev, dtype=dt)
            secs = sync_timed(lambda a=a, b=b: a @ b)  # type: ignore[misc, unused-ignore]
            out[f"gemm_{name}"] = summarise([2.0 * n ** 3 / s for s in secs], "FLOP/s", n=n,
                                            dtype=name)
        src = torch.empty(1 << 28, device=dev, dtype=torch.uint8)
        dst = torch.empty_like(src)
        secs = sync_timed(lambda: dst.copy_(src))
        out["stream_copy"] = summarise([2.0 * src.numel() / s for s in secs], "bytes/s",
                                       array_bytes=src.numel())
        return out
    if importlib.util.find_spec("cupy") is not None:
        import cupy  # type: ignore[import-not-found, unused-ignore]

        try:
            ndev = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # cupy raises its own runtime error types
            return {"skipped": f"cupy is installed but sees no GPU ({e})"}
        if ndev == 0:
            return {"skipped": "cupy is installed but sees no GPU"}
        res: dict[str, Any] = {"library": f"cupy {cupy.__version__}"}
        a = cupy.random.standard_normal((n, n), dtype=cupy.float32)
        b = cupy.random.standard_normal((n, n), dtype=cupy.float32)

        def run() -> None:
            a @ b
            cupy.cuda.runtime.deviceSynchronize()

        res["gemm_float32"] = summarise([2.0 * n ** 3 / s for s in _timed(run, reps)],
                                        "FLOP/s", n=n, dtype="float32")
        return res
    return {"skipped": "neither torch nor cupy is installed, so the GPU's own BLAS and "
                       "copy engines cannot be driven from Python"}


def measure(opts: CalibrateOptions | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every microbenchmark; returns the ``calibration.json`` dict."""
    opts = opts or CalibrateOptions()
    say = progress or (lambda _m: None)
    llc = llc_bytes()
    nbytes = opts.stream_bytes or max(64 << 20, 4 * (llc or 0))
    started = time.time()
    figures: dict[str, Any] = {}
    say(f"GEMM float32 n={opts.gemm_n}")
    figures["gemm_float32"] = gemm(opts.gemm_n, np.float32, opts.gemm_reps)
    say(f"GEMM float64 n={opts.gemm_n}")
    figures["gemm_float64"] = gemm(opts.gemm_n, np.float64, opts.gemm_reps)
    say(f"STREAM copy/triad over {nbytes >> 20} MiB arrays")
    figures.update(stream(nbytes, opts.stream_reps))
    gpu: dict[str, Any] = (gpu_leg(opts.gemm_n, opts.gemm_reps) if opts.gpu
                           else {"skipped": "the GPU leg was turned off (CalibrateOptions.gpu)"})
    ceilings = {
        "cpu_peak_flops_float32": figures["gemm_float32"]["median"],
        "cpu_peak_flops_float64": figures["gemm_float64"]["median"],
        "cpu_memory_bandwidth": max(figures["stream_copy"]["median"],
                                    figures["stream_triad"]["median"]),
    }
    for k in ("gemm_float32", "gemm_float16"):
        if k in gpu:
            ceilings[f"gpu_peak_flops_{k[5:]}"] = gpu[k]["median"]
    if "stream_copy" in gpu:
        ceilings["gpu_memory_bandwidth"] = gpu["stream_copy"]["median"]
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "format": FORMAT, "version": VERSION, "host": socket.gethostname(),
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
        "kernel": platform.release(), "llc_bytes": llc, "blas": blas_info(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": time.time() - started, "load_average": load,
        "figures": figures, "gpu": gpu, "ceilings": ceilings,
        "units": {"flops": "FLOP/s", "bandwidth": "bytes/s"},
        "definitions": "docs/calibration.md",
    }


def load(path: Path) -> dict[str, Any]:
    """Read and check a calibration file; raises :class:`CalibrationError`
    (``FILE: why``) when it is unreadable, not JSON, foreign or incomplete."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{path}: not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CalibrationError(f"{path}: not an aaco-exporter calibration file")
    if data.get("version") != VERSION:
        raise CalibrationError(f"{path}: calibration version {data.get('version')!r}, "
                               f"this exporter reads {VERSION}")
    ceil = data.get("ceilings")
    if not isinstance(ceil, dict) or not all(
            isinstance(ceil.get(k), int | float) and ceil[k] > 0 for k in (
                "cpu_peak_flops_float32", "cpu_peak_flops_float64", "cpu_memory_bandwidth")):
        raise CalibrationError(f"{path}: ceilings missing or not positive numbers")
    return data


def stale_reason(data: dict[str, Any]) -> str | None:
    """Why a loaded calibration does not describe this host, or None."""
    if data.get("host") != socket.gethostname():
        return f"measured on host {data.get('host')!r}"
    if data.get("cpu_model") != cpu_model():
        return f"measured on CPU {data.get('cpu_model')!r}"
    return None


def calibrate(path: Path, refresh: bool = False, opts: CalibrateOptions | None = None,
              progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any], str]:
    """Reuse ``path`` when it is a valid calibration of this host, else measure
    and store it. Returns the calibration and what happened (``reused``,
    ``measured`` or ``remeasured: why``)."""
    why = "--refresh" if refresh else None
    if not refresh and path.exists():
        try:
            data = load(path)
            why = stale_reason(data)
            if why is None:
                return data, "reused"
        except CalibrationError as e:
            why = str(e)
    data = measure(opts, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return data, "measured" if why is None else f"remeasured: {why}"


def find(path: Path | None = None) -> dict[str, Any] | None:
    """The stored calibration for this host (``path`` or :func:`default_path`),
    or None when there is none or it is unusable or another host's."""
    p = path or default_path()
    if not p.exists():
        return None
    try:
        data = load(p)
    except CalibrationError:
        return None
    return data if stale_reason(data) is None else None


def format_summary(data: dict[str, Any]) -> str:
    """One line per figure: median and spread."""
    lines = [f"host {data['host']}  CPU {data['cpu_model']}  ({data['cpu_count']} CPUs)"]
    for name, f in data["figures"].items():
        scale, unit = (1e9, "GFLOP/s") if f["unit"] == "FLOP/s" else (1e9, "GB/s")
        lines.append(f"{name:<14} {f['median'] / scale:10.2f} {unit:<8} "
                     f"spread {100 * (f['spread_ratio'] or 0):5.1f} %  "
                     f"({len(f['repetitions'])} reps)")
    gpu = data.get("gpu") or {}
    if "skipped" in gpu:
        lines.append(f"GPU leg skipped: {gpu['skipped']}")
    else:
        for name, f in gpu.items():
            if isinstance(f, dict) and "median" in f:
                lines.append(f"gpu {name:<10} {f['median'] / 1e9:10.2f} "
                             f"{'GFLOP/s' if f['unit'] == 'FLOP/s' else 'GB/s'}")
    return "\n".join(lines)

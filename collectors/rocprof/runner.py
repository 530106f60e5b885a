"""Running a command under ``rocprofv3`` and finding what it wrote.

``rocprofv3 -d DIR -o NAME --kernel-trace --hip-runtime-trace
--output-format rocpd -- CMD...`` writes the rocpd SQLite database
``DIR/<hostname>/<pid>/NAME_results.db`` (rocpd is rocprofv3's default and only
non-deprecated format since ROCm 7.0); with ``--output-format csv`` (ROCm 6.x,
whose rocprofv3 has no rocpd) it writes ``NAME_kernel_trace.csv`` and
``NAME_hip_api_trace.csv`` there instead. ``%hostname%/%pid%`` are rocprofv3's
default sub-directories when ``-d`` is given. :func:`find_outputs` accepts
either.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from collectors.rocprof.formats import KERNEL_FORMATS, UnknownFormat, detect

OUTPUT_NAME = "aaco"


def rocprofv3_command(
    out_dir: Path,
    cmd: Sequence[str],
    *,
    rocprofv3: str = "rocprofv3",
    collection_period: str | None = None,
    output_format: str = "rocpd",
    pmc: Sequence[str] = (),
) -> list[str]:
    """argv running ``cmd`` under rocprofv3 with kernel + HIP runtime traces
    into ``out_dir`` as ``output_format`` (rocprofv3 ``--output-format``:
    ``rocpd``, the default, or ``csv``).

    ``collection_period`` (rocprofv3 ``--collection-period``, e.g.
    ``"0:1:0"`` = delay:duration:repeat seconds) is passed through when set;
    ``pmc`` (hardware counters, rocprofv3 ``--pmc``) too, for ``roofline.json``.

    >>> rocprofv3_command(Path("/tmp/o"), ["python", "x.py"])[:4]
    ['rocprofv3', '-d', '/tmp/o', '-o']
    """
    argv = [rocprofv3, "-d", str(out_dir), "-o", OUTPUT_NAME, "--kernel-trace",
            "--hip-runtime-trace", "--output-format", output_format]
    if collection_period:
        argv += ["--collection-period", collection_period]
    if pmc:
        argv += ["--pmc", *pmc]
    return [*argv, "--", *cmd]


def rocprofv3_help(name: str = "rocprofv3", timeout_s: float = 20.0) -> str | None:
    """``name --help`` output (stdout and stderr), or ``None`` when it cannot run."""
    try:
        out = subprocess.run([name, "--help"], capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout + out.stderr


def rocprofv3_output_format(name: str = "rocprofv3", timeout_s: float = 20.0) -> str:
    """``rocpd`` when ``name --help`` lists it as an output format (rocprofv3
    of ROCm >= 7.0), else ``csv`` (older releases, or a help that cannot be read)."""
    return "rocpd" if "rocpd" in (rocprofv3_help(name, timeout_s) or "") else "csv"


def rocprofv3_available(name: str = "rocprofv3") -> bool:
    """Whether ``name`` is on ``PATH``."""
    return shutil.which(name) is not None


def find_outputs(out_dir: Path) -> list[Path]:
    """Kernel-carrying files under ``out_dir`` (recursive, sorted).

    Files of other or unknown formats are left out (their HIP API trace
    siblings are found by :func:`collectors.rocprof.replay.load_paths` and
    :func:`collectors.rocprof.replay.hip_api_table`)."""
    found = []
    for f in sorted(p for p in out_dir.rglob("*") if p.is_file()):
        try:
            if detect(f) in KERNEL_FORMATS:
                found.append(f)
        except (UnknownFormat, OSError):
            continue
    return found

"""glibc ``malloc`` settings for a bulk job (``replay``).

A replay makes and frees numpy arrays for every batch it parses, folds and
encodes (hundreds of KB to a few MB each). With glibc's defaults, memory
freed at the top of a heap goes back to the kernel and the next batch faults
it in again, page by page: a 2M-row ``replay`` took about 290,000 minor page
faults and 1.2-1.9 s of system time (``/usr/bin/time``, 2-core VM). Serving
blocks up to 32 MiB from the heap (``M_MMAP_THRESHOLD``; the default starts
at 128 KiB, and setting any parameter stops glibc from raising it itself),
growing heaps 64 MiB at a time (``M_TOP_PAD``) and returning their top only
beyond 512 MiB (``M_TRIM_THRESHOLD``) cut that to about 90,000 faults and
0.7-1.1 s, for 30-120 MiB more peak RSS (``benchmarks/README.md``, replay
round 4).

Only ``replay`` calls :func:`tune_for_batch`: the daemon keeps glibc's
defaults, where RSS matters more than a bulk job's system time, and so does
``capture``, whose process also runs the workload it measures. Nothing is
changed when the C library has no ``mallopt`` (musl), or when the user set
any of glibc's ``MALLOC_*`` variables or ``GLIBC_TUNABLES`` in the
environment (theirs win).
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter numbers (glibc ``malloc.h``)."""

SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TOP_PAD, 64 << 20),
            (M_TRIM_THRESHOLD, 512 << 20))
"""``(parameter, bytes)`` applied by :func:`tune_for_batch`, in order (32 MiB:
the ceiling of glibc's own dynamic mmap threshold on 64-bit)."""


def tune_for_batch() -> bool:
    """Apply the settings above to this process; returns whether they were
    applied (``False``: no glibc ``mallopt``, or the environment has a
    ``MALLOC_*`` variable or ``GLIBC_TUNABLES``). Affects allocations made after the call."""
    if "GLIBC_TUNABLES" in os.environ or any(v.startswith("MALLOC_") for v in os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(bool(mallopt(param, value)) for param, value in SETTINGS)

"""numpy imported without OpenBLAS's start-up spin (for a bulk job: ``replay``).

numpy's wheels bundle OpenBLAS (``libscipy_openblas64_``), which starts its
worker threads when numpy is imported. Each worker then busy-waits for work
(``sched_yield`` in a loop) for ``2**28`` TSC cycles before it sleeps on a
condition variable: about 0.1 s of CPU per worker on every process that
imports numpy (measured on the 2-core VM: 10 clock ticks of the worker
thread in ``/proc/self/task/TID/stat``, whether or not any BLAS routine is
ever called; ``replay`` calls none). ``replay`` imports numpy while its
parser thread has started, so that spin takes CPU from the parser on a
2-core machine.

OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` (``n``: spin ``2**n`` cycles,
clamped to 4..30) once, when the library loads. :func:`import_numpy` sets it
to 4 for the import and removes it again, so child processes (a workload
``capture`` runs) inherit the user's environment unchanged. BLAS still runs
on every thread when it is used: a woken worker takes the work as before.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "OPENBLAS_THREAD_TIMEOUT"
SPIN_LOG2_CYCLES = "4"
"""The shortest spin OpenBLAS accepts (``2**4`` cycles)."""


def import_numpy() -> bool:
    """Import numpy with OpenBLAS's idle workers asleep at once; returns whether
    the setting was applied (``False``: numpy was imported already, or the user
    set ``OPENBLAS_THREAD_TIMEOUT`` or ``GOTO_THREAD_TIMEOUT`` themselves)."""
    if "numpy" in sys.modules or VARIABLE in os.environ or "GOTO_THREAD_TIMEOUT" in os.environ:
        return False
    os.environ[VARIABLE] = SPIN_LOG2_CYCLES
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[VARIABLE]
    return True

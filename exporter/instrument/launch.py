"""``aaco-exporter instrument -- CMD ARGS``: run CMD with ONNX Runtime instrumented.

Like ``opentelemetry-instrument``: :data:`BOOTSTRAP_DIR` (holding a
``sitecustomize.py``) goes first on ``PYTHONPATH``, ``AACO_INSTRUMENT=1`` is
set, and the process is replaced by CMD (``os.execvpe``), so its exit status
is the program's. Python programs started by CMD inherit both and are
instrumented too.

Errors: :class:`LaunchError` (no command, or one not found / not executable).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"


class LaunchError(RuntimeError):
    """The command cannot be run."""


def instrumented_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the bootstrap first on ``PYTHONPATH`` and ``AACO_INSTRUMENT=1``.

    >>> e = instrumented_env({"PYTHONPATH": "/x"})
    >>> e["PYTHONPATH"] == f"{BOOTSTRAP_DIR}{os.pathsep}/x", e["AACO_INSTRUMENT"]
    (True, '1')
    """
    out = dict(env)
    rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep)
            if p and p != str(BOOTSTRAP_DIR)]
    out["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP_DIR), *rest])
    out["AACO_INSTRUMENT"] = "1"
    return out


def exec_instrumented(command: Sequence[str]) -> None:
    """Replace this process with ``command`` under instrumentation (no return)."""
    if not command:
        raise LaunchError("no command given: use aaco-exporter instrument -- CMD [ARGS]")
    env = instrumented_env(os.environ)
    if shutil.which(command[0], path=env.get("PATH")) is None:
        raise LaunchError(f"command not found: {command[0]}")
    try:
        os.execvpe(command[0], list(command), env)
    except OSError as e:
        raise LaunchError(f"cannot run {command[0]}: {e.strerror or e}") from None

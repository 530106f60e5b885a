"""Run an SMI command line with a hard timeout.

A hung ``amd-smi`` must never stall the daemon: the child runs in its own
session and the whole process group is killed when ``timeout_s`` passes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


class CliError(RuntimeError):
    """The command did not give usable output.

    ``reason`` is a bounded drop token: ``cli_timeout``, ``cli_exit``
    (non-zero exit status), ``cli_missing`` (not found / not executable).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def run_cli(argv: list[str], timeout_s: float = 2.0) -> str:
    """``argv``'s stdout as text; raises :class:`CliError` naming the command.

    >>> run_cli(["echo", "hi"])
    'hi\\n'
    """
    cmd = " ".join(argv)
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )
    except OSError as e:
        raise CliError("cli_missing", f"{cmd}: {e.strerror or e}") from e
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise CliError("cli_timeout", f"{cmd}: no answer within {timeout_s:g} s, killed") from None
    if proc.returncode != 0:
        tail = (err or out or "").strip().splitlines()[-1:] or [""]
        raise CliError("cli_exit", f"{cmd}: exit status {proc.returncode}: {tail[0][:200]}")
    return out

"""What ``rocprofv3 --attach PID`` needs, checked up front, one message each.

Sources: rocprofiler-sdk's *Dynamic process attachment using rocprofv3*
(the target must run with ``ROCP_TOOL_ATTACH=1``; the profiler must be allowed
to ptrace it: same user or root, Yama ``kernel.yama.ptrace_scope``, and
``CAP_SYS_PTRACE`` in containers) and ``proc(5)`` / ``capabilities(7)``.

Each check returns ``None`` when satisfied, else one line saying what is
missing (the reason a window is not started), and never raises.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from collectors.rocprof.runner import rocprofv3_help

CAP_SYS_PTRACE = 19
"""Bit of ``CAP_SYS_PTRACE`` in ``/proc/PID/status`` ``CapEff`` (capabilities(7))."""


def tool_problem(exe: str, timeout_s: float = 20.0) -> str | None:
    """``exe`` is on PATH and its ``--help`` offers ``--attach`` (ROCm >= 7.0)."""
    path = shutil.which(exe)
    if path is None:
        return f"{exe} not found on PATH (rocprofiler-sdk's rocprofv3 is needed for --attach)"
    text = rocprofv3_help(path, timeout_s)
    if text is None:
        return f"{path} --help could not be run"
    if "--attach" not in text:
        return f"{path} has no --attach (process attachment needs rocprofv3 of ROCm >= 7.0)"
    return None


def env_problem(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The target was started with ``ROCP_TOOL_ATTACH=1`` (``/proc/PID/environ``).

    An environ that may not be read is not a problem (attach is tried; the
    message is only logged): returns ``None`` then.
    """
    try:
        env = (proc / str(pid) / "environ").read_bytes().split(b"\0")
    except FileNotFoundError:
        return f"pid {pid} does not exist"
    except OSError:
        return None
    if b"ROCP_TOOL_ATTACH=1" not in env:
        return (f"pid {pid} was not started with ROCP_TOOL_ATTACH=1 in its environment "
                "(rocprofv3 --attach needs it)")
    return None


def has_cap_sys_ptrace(status: str) -> bool:
    """Whether ``CapEff`` of a ``/proc/PID/status`` text includes CAP_SYS_PTRACE.

    >>> has_cap_sys_ptrace("Name:\\tx\\nCapEff:\\t000001ffffffffff\\n")
    True
    >>> has_cap_sys_ptrace("CapEff:\\t0000000000000000\\n")
    False
    """
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    return False


def ptrace_problem(pid: int, proc: Path = Path("/proc")) -> str | None:
    """This process may ptrace ``pid``: Yama ``ptrace_scope`` (0: same user; 1:
    a descendant, or CAP_SYS_PTRACE; 2: CAP_SYS_PTRACE; 3: never) and, for
    another user's process, CAP_SYS_PTRACE."""
    try:
        scope = int((proc / "sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        scope = 0  # no Yama
    try:
        cap = has_cap_sys_ptrace((proc / "self/status").read_text())
        owner = (proc / str(pid)).stat().st_uid
    except FileNotFoundError:
        return f"pid {pid} does not exist"
    except OSError as e:
        return f"cannot read /proc for pid {pid}: {e}"
    if scope >= 3:
        return "kernel.yama.ptrace_scope=3: no process may be attached to"
    if scope >= 1 and not cap:
        return (f"kernel.yama.ptrace_scope={scope} without CAP_SYS_PTRACE (run as root, add "
                "CAP_SYS_PTRACE, or set kernel.yama.ptrace_scope=0)")
    if owner != os.geteuid() and not cap:
        return f"pid {pid} belongs to uid {owner}: attaching needs CAP_SYS_PTRACE"
    return None

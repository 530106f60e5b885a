"""Cheap reads of small ``/proc`` files, for paths read every interval.

Python's ``open(path, "rb").read()`` costs about seven system calls (``openat``,
``fstat``, ``ioctl`` for ``isatty``, ``lseek``, two ``read`` and ``close``);
:func:`read_small` uses three or four (``openat``, ``read`` until a short
read, ``close``). The collectors read a few files per watched thread per
second and one per process per discovery rescan, so the difference shows in
the always-on daemon's CPU (``benchmarks/bench_daemon_cost.py``).
"""

from __future__ import annotations

import os

CHUNK = 16384
"""Bytes asked for per ``read``: a thread's ``status`` is about 1.5 KiB."""


def read_small(path: str) -> bytes:
    """The whole content of ``path``. Raises ``OSError`` as ``open`` does
    (``FileNotFoundError`` for a process that exited, ``PermissionError``)
    and ``ProcessLookupError`` (``ESRCH``) for one exiting mid-read.

    >>> read_small("/proc/self/comm").endswith(b"\\n")
    True
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, CHUNK)
        if len(data) < CHUNK:  # /proc returns a small file in one read
            return data
        parts = [data]
        while chunk := os.read(fd, CHUNK):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)

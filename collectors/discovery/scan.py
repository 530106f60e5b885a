"""Find the inference processes on a node (workload discovery).

A process is a *candidate* when any selector picks it:

==========  =================================================================
``auto``    it holds ``/dev/kfd`` or ``/dev/dri/renderD*`` open (its
            ``/proc/PID/fd/*`` links), or has a GPU/inference runtime mapped
            (``/proc/PID/maps`` path contains ``libamdhip64``,
            ``libhsa-runtime64``, ``libonnxruntime``,
            ``onnxruntime_pybind11_state`` (the ``onnxruntime`` wheel) or
            ``libtorch``)
``comm``    its ``comm`` (``/proc/PID/comm``, via psutil ``name()``) matches a
            regular expression (``re.search``)
``cgroup``  it is in a cgroup directory or one below it (``cgroup.procs``;
            a relative path is looked up under ``/sys/fs/cgroup``, then
            ``/sys/fs/cgroup/unified`` on hybrid hosts)
``pid``     it was named explicitly
==========  =================================================================

The descendants of every candidate (from the ``ppid`` psutil reports) are
watched too, with reason ``child``; threads need nothing extra, since the
scheduler collectors walk ``/proc/PID/task``. The exporter's own process tree
is never a candidate. Past ``max_watched`` processes, explicit pids come first,
then the oldest processes (so a long-running server never flaps out); each
process left out is counted once in ``drops["max_watched"]``. A process whose
files may not be read is counted once in ``drops["unreadable"]`` and reported
once through ``log``; one that exits mid-scan is skipped silently.

Process enumeration and the tree are read from ``/proc/PID/stat`` directly,
one read per process (:func:`proc_entries`; psutil's ``process_iter`` reads it
two or three times per process and scan, and ``children()`` walks every
process once more), with psutil's own rules for the name and start time; fds
and maps are read from ``/proc`` directly too, because psutil reports regular
files only (not the ``/dev/kfd`` character device) and its ``memory_maps()``
parses the much larger ``smaps``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import psutil

from collectors.procfs import read_small

GPU_DEVICES = ("/dev/kfd", "/dev/dri/renderD")
"""fd link targets (prefixes) that mark a GPU process (AMD KFD, DRM render nodes)."""
RUNTIME_LIBS = (b"libamdhip64", b"libhsa-runtime64", b"libonnxruntime",
                b"onnxruntime_pybind11_state", b"libtorch")
"""Substrings of mapped paths that mark an inference process."""


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ProcEntry(NamedTuple):
    """One process from ``/proc/PID/stat``: ``name`` as psutil's ``name()``
    gives it (the ``comm``; when that is 15 characters, the basename of
    ``argv[0]`` if it starts with it), ``state`` the one-letter state and
    ``create_ns`` psutil's ``create_time()`` (start ticks / ``CLK_TCK`` + boot
    time, s) in Unix ns."""

    pid: int
    ppid: int
    name: str
    state: str
    create_ns: int


def _long_name(pid: int, comm: str) -> str:
    """psutil's rule for a ``comm`` the kernel cut at 15 characters."""
    try:
        data = read_small(f"/proc/{pid}/cmdline")
    except OSError:
        return comm
    if not data:
        return comm
    sep = b"\0" if data.endswith(b"\0") else b" "  # psutil's cmdline(): setproctitle
    if data.endswith(sep):
        data = data[:-1]
    args = data.split(sep)
    if sep == b"\0" and len(args) == 1 and b" " in data:
        args = data.split(b" ")
    ext = os.path.basename(args[0].decode("utf-8", "surrogateescape"))
    return ext if ext.startswith(comm) else comm


def proc_entries(proc: str = "/proc", names: dict[tuple[int, int], str] | None = None
                 ) -> Iterator[ProcEntry]:  # fmt: skip
    """Every process under ``proc``, one ``stat`` read each; a process that
    exits meanwhile is skipped. ``names`` (optional) remembers the names read
    from ``cmdline`` (for a ``comm`` of 15 characters) by ``(pid, start
    ticks)``, so a rescan reads each process's ``cmdline`` once, as psutil's
    ``Process.name()`` caches it; the caller prunes it."""
    boot = psutil.boot_time()
    for d in os.listdir(proc):
        if not d.isdigit():
            continue
        try:
            data = read_small(f"{proc}/{d}/stat")
        except OSError:
            continue
        lp, rp = data.find(b"("), data.rfind(b")")
        fields = data[rp + 2:].split()
        if lp < 0 or rp < lp or len(fields) < 20:
            continue
        pid = int(d)
        comm = data[lp + 1:rp].decode("utf-8", "surrogateescape")
        if len(comm) < 15:
            name = comm
        elif names is None:
            name = _long_name(pid, comm)
        else:
            ident = (pid, int(fields[19]))
            got = names.get(ident)
            name = got if got is not None else names.setdefault(ident, _long_name(pid, comm))
        ctime = float(fields[19]) / CLOCK_TICKS + boot
        yield ProcEntry(pid, int(fields[1]), name, fields[0].decode(), int(ctime * 1e9))


@dataclass(frozen=True)
class Target:
    """One watched process: ``pid``, its ``comm`` (at most 15 bytes, the
    kernel's ``TASK_COMM_LEN``), ``reason`` (``kfd``, ``render``,
    ``lib:<name>``, ``comm``, ``cgroup``, ``pid`` or ``child``) and its start
    time (``create_ns``, Unix ns, from psutil ``create_time()``)."""

    pid: int
    comm: str
    reason: str
    create_ns: int


@dataclass
class Selectors:
    """What to watch. ``auto`` turns on device/library detection."""

    auto: bool = True
    comm: str | None = None
    cgroup: str | None = None
    pids: tuple[int, ...] = ()

    def any(self) -> bool:
        return self.auto or bool(self.comm or self.cgroup or self.pids)


@dataclass
class Discovery:
    """Rescans on each :meth:`scan`; keeps per-process verdicts by start time.

    >>> d = Discovery(Selectors(auto=False, pids=(os.getpid(),)), exclude=set())
    >>> [t.reason for t in d.scan().values()]
    ['pid']
    """

    selectors: Selectors
    max_watched: int = 64
    exclude: set[int] | None = None  # default: this process and its descendants
    cgroup_root: Path = Path("/sys/fs/cgroup")
    log: Callable[[str], None] = print
    drops: Counter[str] = field(default_factory=Counter)
    _unreadable: set[tuple[int, int]] = field(default_factory=set)
    _left_out: set[tuple[int, int]] = field(default_factory=set)
    _names: dict[tuple[int, int], str] = field(default_factory=dict)  # (pid, start) -> name

    def __post_init__(self) -> None:
        self._comm_re = re.compile(self.selectors.comm) if self.selectors.comm else None

    def _excluded(self, kids_of: dict[int, list[int]]) -> set[int]:
        """``exclude``, or this process and its descendants (from this scan's
        ppid map, ``kids_of``)."""
        if self.exclude is not None:
            return self.exclude
        out, stack = set(), [os.getpid()]
        while stack:
            pid = stack.pop()
            if pid not in out:
                out.add(pid)
                stack.extend(kids_of.get(pid, ()))
        return out

    def _cgroup_pids(self) -> set[int]:
        spec = self.selectors.cgroup
        if not spec:
            return set()
        p = Path(spec)
        cands = [p] if p.is_absolute() else [self.cgroup_root / p,
                                             self.cgroup_root / "unified" / p]
        root = next((c for c in cands if c.is_dir()), cands[0])
        out: set[int] = set()
        for dirpath, _, files in os.walk(root):
            if "cgroup.procs" in files:
                try:
                    out.update(int(x) for x in Path(dirpath, "cgroup.procs").read_text().split())
                except (OSError, ValueError):
                    continue
        return out

    def _auto(self, pid: int) -> str | None:
        """Why process ``pid`` is an inference process, or None. Raises psutil
        errors (``NoSuchProcess``, ``AccessDenied``)."""
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            raise psutil.NoSuchProcess(pid) from None
        except PermissionError:
            raise psutil.AccessDenied(pid) from None
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target == GPU_DEVICES[0]:
                return "kfd"
            if target.startswith(GPU_DEVICES[1]):
                return "render"
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                maps = f.read()
        except FileNotFoundError:
            raise psutil.NoSuchProcess(pid) from None
        except PermissionError:
            raise psutil.AccessDenied(pid) from None
        for lib in RUNTIME_LIBS:
            if lib in maps:
                return f"lib:{lib.decode()}"
        return None

    def _classify(self, e: ProcEntry, explicit: set[int], in_cgroup: set[int]) -> str | None:
        if e.pid in explicit:
            return "pid"
        if e.pid in in_cgroup:
            return "cgroup"
        if self._comm_re is not None and self._comm_re.search(e.name):
            return "comm"
        if self.selectors.auto:
            return self._auto(e.pid)
        return None

    def scan(self) -> dict[int, Target]:
        """The processes to watch now, by pid (see the module doc)."""
        entries = {e.pid: e for e in sorted(proc_entries(names=self._names))}
        for ident in [i for i in self._names if i[0] not in entries]:  # gone: forget
            del self._names[ident]
        if len(self._names) > 4 * len(entries) + 64:  # pids reused between scans: start over
            self._names.clear()
        kids_of: dict[int, list[int]] = {}  # one ppid map per scan, for both trees
        for e in entries.values():
            kids_of.setdefault(e.ppid, []).append(e.pid)
        excluded = self._excluded(kids_of)
        explicit, in_cgroup = set(self.selectors.pids), self._cgroup_pids()
        found: dict[int, Target] = {}
        alive: set[tuple[int, int]] = set()
        for e in entries.values():
            if e.pid in excluded or e.pid == 0 or e.state == "Z":
                continue
            ident = (e.pid, e.create_ns)
            alive.add(ident)
            try:
                reason = self._classify(e, explicit, in_cgroup)
            except psutil.NoSuchProcess:
                continue
            except psutil.AccessDenied as err:
                if ident not in self._unreadable:
                    self._unreadable.add(ident)
                    self.drops["unreadable"] += 1
                    self.log(f"discovery: cannot read pid {e.pid} "
                             f"({e.name}): {err.msg or 'permission denied'}")
                continue
            if reason is not None:
                found[e.pid] = Target(e.pid, e.name[:15], reason, e.create_ns)
        stack = list(found)  # descendants of the candidates
        while stack:
            for kid in kids_of.get(stack.pop(), ()):
                if kid in found or kid in excluded:
                    continue
                k = entries[kid]
                if k.state == "Z":
                    continue
                found[kid] = Target(kid, k.name[:15], "child", k.create_ns)
                stack.append(kid)
        # forget verdicts of processes that are gone (bounded memory)
        self._unreadable &= alive
        self._left_out &= alive
        return self._cap(found, explicit)

    def _cap(self, found: dict[int, Target], explicit: Iterable[int]) -> dict[int, Target]:
        if len(found) <= self.max_watched:
            return found
        ex = set(explicit)
        ranked = sorted(found.values(), key=lambda t: (t.pid not in ex, t.create_ns, t.pid))
        keep, out = ranked[: self.max_watched], ranked[self.max_watched:]
        for t in out:
            ident = (t.pid, t.create_ns)
            if ident not in self._left_out:
                self._left_out.add(ident)
                self.drops["max_watched"] += 1
        return {t.pid: t for t in keep}

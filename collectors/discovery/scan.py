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

Process enumeration and the tree come from psutil; fds and maps are read from
``/proc`` directly, because psutil reports regular files only (not the
``/dev/kfd`` character device) and its ``memory_maps()`` parses the much
larger ``smaps``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

GPU_DEVICES = ("/dev/kfd", "/dev/dri/renderD")
"""fd link targets (prefixes) that mark a GPU process (AMD KFD, DRM render nodes)."""
RUNTIME_LIBS = (b"libamdhip64", b"libhsa-runtime64", b"libonnxruntime",
                b"onnxruntime_pybind11_state", b"libtorch")
"""Substrings of mapped paths that mark an inference process."""


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

    def __post_init__(self) -> None:
        self._comm_re = re.compile(self.selectors.comm) if self.selectors.comm else None

    def _excluded(self) -> set[int]:
        if self.exclude is not None:
            return self.exclude
        me = os.getpid()
        try:
            return {me, *(c.pid for c in psutil.Process(me).children(recursive=True))}
        except psutil.Error:
            return {me}

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

    def _auto(self, proc: psutil.Process) -> str | None:
        """Why ``proc`` is an inference process, or None. Raises psutil errors."""
        fd_dir = f"/proc/{proc.pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            raise psutil.NoSuchProcess(proc.pid) from None
        except PermissionError:
            raise psutil.AccessDenied(proc.pid) from None
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
            with open(f"/proc/{proc.pid}/maps", "rb") as f:
                maps = f.read()
        except FileNotFoundError:
            raise psutil.NoSuchProcess(proc.pid) from None
        except PermissionError:
            raise psutil.AccessDenied(proc.pid) from None
        for lib in RUNTIME_LIBS:
            if lib in maps:
                return f"lib:{lib.decode()}"
        return None

    def _classify(self, proc: psutil.Process, explicit: set[int],
                  in_cgroup: set[int]) -> str | None:
        if proc.pid in explicit:
            return "pid"
        if proc.pid in in_cgroup:
            return "cgroup"
        if self._comm_re is not None and self._comm_re.search(proc.info["name"] or ""):
            return "comm"
        if self.selectors.auto:
            return self._auto(proc)
        return None

    def scan(self) -> dict[int, Target]:
        """The processes to watch now, by pid (see the module doc)."""
        excluded = self._excluded()
        explicit, in_cgroup = set(self.selectors.pids), self._cgroup_pids()
        found: dict[int, Target] = {}
        infos: dict[int, tuple[int, str, int]] = {}  # pid -> (ppid, comm, create_ns)
        alive: set[tuple[int, int]] = set()
        for proc in psutil.process_iter(["name", "create_time", "status", "ppid"]):
            if (proc.pid in excluded or proc.pid == 0
                    or proc.info["status"] == psutil.STATUS_ZOMBIE):
                continue
            ident = (proc.pid, int(proc.info["create_time"] * 1e9))
            alive.add(ident)
            infos[proc.pid] = (proc.info["ppid"] or 0, (proc.info["name"] or "")[:15], ident[1])
            try:
                reason = self._classify(proc, explicit, in_cgroup)
            except psutil.NoSuchProcess:
                continue
            except psutil.AccessDenied as e:
                if ident not in self._unreadable:
                    self._unreadable.add(ident)
                    self.drops["unreadable"] += 1
                    self.log(f"discovery: cannot read pid {proc.pid} "
                             f"({proc.info['name']}): {e.msg or 'permission denied'}")
                continue
            if reason is not None:
                found[proc.pid] = Target(proc.pid, (proc.info["name"] or "")[:15], reason,
                                         ident[1])
        # descendants from one ppid map of this scan (psutil's children() would
        # walk every process again for each parent)
        kids_of: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in infos.items():
            kids_of.setdefault(ppid, []).append(pid)
        stack = list(found)
        while stack:
            for kid in kids_of.get(stack.pop(), ()):
                if kid in found or kid in excluded:
                    continue
                _, name, create_ns = infos[kid]
                found[kid] = Target(kid, name, "child", create_ns)
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

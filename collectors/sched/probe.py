"""The eBPF side of the ``sched`` collector: load ``probe.c`` with BCC, drain it.

The program (``probe.c`` next to this module) aggregates in kernel maps, per
watched thread, on the stable tracepoints ``sched:sched_wakeup``,
``sched:sched_wakeup_new``, ``sched:sched_switch``, ``sched:sched_migrate_task``
and ``exceptions:page_fault_user`` (when the kernel has it). Nothing is sent
per event: :meth:`SchedProbe.drain` reads and deletes the maps once per
interval (``BPF_MAP_LOOKUP_BATCH``; the counters are cumulative and user
space subtracts, so no update is lost at the boundary) and :func:`to_table` turns the
result into :data:`exporter.schema.SCHED_SAMPLE` rows with ``source="ebpf"``.

Definitions (all ns, per interval, per thread; ``docs/sched.md`` has more):

* ``runq_wait_ns``: time runnable but not running, from ``sched_wakeup`` /
  ``sched_wakeup_new`` (or a switch-out with ``prev_state`` runnable, i.e. a
  preemption) to the ``sched_switch`` that puts the thread on a CPU;
* ``run_ns``: switch-in to switch-out;
* a slice or wait still in progress at drain time is credited up to the drain
  and the credit is taken back when the kernel reports it completed, so long
  slices are not reported in one lump;
* ``runq_hist_log2_ns[i]`` counts completed waits in ``[2^i, 2^(i+1))`` ns
  (:data:`HIST_BUCKETS` buckets, the last one open-ended);
* ``voluntary``/``involuntary``: switch-outs with ``prev_state & 0xff`` != 0
  (blocked) / == 0 (runnable: preempted or yielded), as ``nvcsw``/``nivcsw``;
* ``minor_faults``: ``exceptions:page_fault_user`` events (all user-mode page
  faults; the tracepoint cannot tell minor from major, so ``major_faults`` is
  null);
* ``top_preemptors``: per process, the commands of tasks outside the watched
  set that were switched in on a CPU where a thread of that process waited.

Errors: :class:`ProbeError` with a ``reason`` in ``no-bcc``, ``no-privilege``,
``no-headers``, ``compile`` (the text did not compile or attach).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from exporter.schema import SCHED_SAMPLE

_COUNTERS = (
    "runq_wait_ns",
    "run_ns",
    "voluntary",
    "involuntary",
    "migrations",
    "faults",
    "switch_ins",
    "no_start",
    "no_slice_start",
    "unseen_ns",
)
HIST_BUCKETS = 40
"""Length of ``runq_hist_log2_ns``; bucket 39 holds every wait >= 2^39 ns."""

TOP_PREEMPTORS = 5
"""How many preempting commands a row names, most frequent first."""

PROGRAM = Path(__file__).with_name("probe.c")
_TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
_CAP_SYS_ADMIN, _CAP_PERFMON, _CAP_BPF = 21, 38, 39


class ProbeError(RuntimeError):
    """The eBPF backend cannot run; ``reason`` is a short machine tag."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def bpf_privilege_problem(status_path: str = "/proc/self/status") -> str | None:
    """``None`` when the effective capabilities allow loading tracepoint
    programs (``CAP_SYS_ADMIN``, or ``CAP_BPF`` and ``CAP_PERFMON``), else a
    sentence saying what is missing. Source: ``CapEff`` in ``status_path``.
    """
    try:
        for line in Path(status_path).read_text().splitlines():
            if line.startswith("CapEff:"):
                eff = int(line.split()[1], 16)
                break
        else:
            return f"no CapEff line in {status_path}"
    except OSError as e:
        return f"cannot read {status_path}: {e}"
    if eff >> _CAP_SYS_ADMIN & 1 or (eff >> _CAP_BPF & 1 and eff >> _CAP_PERFMON & 1):
        return None
    return f"euid {os.geteuid()} lacks CAP_BPF+CAP_PERFMON (or CAP_SYS_ADMIN): CapEff={eff:#x}"


def find_kernel_headers() -> str | None:
    """Directory to use as ``BCC_KERNEL_SOURCE``, or ``None``.

    Order: ``$BCC_KERNEL_SOURCE``, ``$AACO_BCC_HEADERS``, ``<repo>/.bcc-headers``
    and ``/opt/aaco/bcc-headers`` (made by ``scripts/setup-bcc.sh``), then
    ``/lib/modules/$(uname -r)/build``. A candidate counts when it has
    ``include/generated/autoconf.h``.
    """
    cands = [
        os.environ.get("BCC_KERNEL_SOURCE"),
        os.environ.get("AACO_BCC_HEADERS"),
        str(Path(__file__).resolve().parents[2] / ".bcc-headers"),
        "/opt/aaco/bcc-headers",
        f"/lib/modules/{platform.release()}/build",
    ]
    for c in cands:
        if c and Path(c, "include", "generated", "autoconf.h").is_file():
            return c
    return None


def tracepoint_exists(category: str, event: str) -> bool:
    """Whether tracefs lists ``category:event`` (checks both mount points);
    ``False`` when tracefs is unreadable (e.g. not root)."""
    for t in _TRACEFS:
        try:
            if Path(t, "events", category, event).is_dir():
                return True
        except OSError:
            continue
    return False


@dataclass
class ThreadStats:
    """One watched thread over one interval (ns and counts; see module doc).

    ``switch_ins`` counts every switch-in; ``no_start`` those whose wait
    start the probe did not see (thread watched while already runnable), so
    ``sum(hist) + no_start == switch_ins``. ``no_slice_start`` counts
    switch-outs whose switch-in the probe did not see, so over a window that
    starts and ends with the thread off CPU ``voluntary + involuntary ==
    switch_ins + no_slice_start``; such a slice (and the wait before it) is
    missing from ``run_ns`` / ``runq_wait_ns``, and ``unseen_ns`` holds their
    sum (wait start to that switch-out) where the wait start was seen; the
    split between the two is unknown. Sources: a thread learnt at
    its first switch-out (cgroup watch, thread born after the last refresh),
    and switch-ins for which the kernel fires no ``sched:sched_switch`` at
    all (seen on Firecracker VMs: about one per CPU-second, after the VM
    agent's threads run).
    """

    pid: int
    tid: int
    comm: str
    runq_wait_ns: int = 0
    run_ns: int = 0
    voluntary: int = 0
    involuntary: int = 0
    migrations: int = 0
    faults: int = 0
    switch_ins: int = 0
    no_start: int = 0
    no_slice_start: int = 0
    unseen_ns: int = 0
    hist: list[int] = field(default_factory=lambda: [0] * HIST_BUCKETS)


@dataclass
class Drain:
    """What one :meth:`SchedProbe.drain` returns.

    ``ts_ns`` is wall time (``CLOCK_REALTIME``) at the drain, ``interval_ns``
    the monotonic time since the previous drain (or the attach);
    ``preemptors`` maps a watched pid to ``[(comm, switch_ins), ...]``, most
    frequent first.
    """

    ts_ns: int
    interval_ns: int
    threads: list[ThreadStats]
    preemptors: dict[int, list[tuple[str, int]]]


def _int(x: Any) -> int:
    """ctypes scalar or plain int (batch reads give ints) -> int."""
    return int(x.value) if hasattr(x, "value") else int(x)


def _cstr(b: Any) -> str:
    return bytes(b).split(b"\0", 1)[0].decode("utf-8", "replace")


class _Credit:
    """In-progress slice/wait bookkeeping for one metric (see module doc).

    :meth:`settle` turns one interval's completed time into the time to
    report: it adds the part of an in-progress slice/wait (start ``cur``)
    elapsed by ``now`` and not yet reported, and takes back what earlier
    drains reported of one that has since ended (``last_start`` at or after
    its start). A take-back larger than the interval's time is carried to
    the next interval, never dropped, so the reported sum over intervals is
    exact. All values ns.

    >>> c = _Credit()
    >>> c.settle(7, 0, 0, 100, 250)     # waiting since 100: 150 so far
    150
    >>> c.settle(7, 0, 100, None, 400)  # that wait ended unseen: take back
    0
    >>> c.settle(7, 200, 300, None, 600)  # 150 of debt paid from 200
    50
    """

    def __init__(self) -> None:
        self.ledger: dict[int, tuple[int, int]] = {}  # tid -> (start, credited)
        self.debt: dict[int, int] = {}  # tid -> take-back not yet paid

    def settle(self, tid: int, completed: int, last_start: int, cur: int | None, now: int) -> int:
        adj = completed - self.debt.pop(tid, 0)
        led = self.ledger.get(tid)
        if led is not None and last_start and last_start >= led[0]:
            adj -= led[1]
            led = None
        if cur is not None and (led is None or led[0] == cur):
            done = led[1] if led is not None else 0
            credit = max(0, now - cur)
            adj += max(0, credit - done)
            led = (cur, max(credit, done))
        if led is None:
            self.ledger.pop(tid, None)
        else:
            self.ledger[tid] = led
        if adj < 0:
            self.debt[tid] = -adj
        return max(adj, 0)

    def forget(self, keep: Iterable[int]) -> None:
        k = set(keep)
        for tid in [t for t in self.ledger if t not in k]:
            del self.ledger[tid]
        for tid in [t for t in self.debt if t not in k]:
            del self.debt[tid]


class SchedProbe:
    """The loaded and attached program.

    ``text`` replaces ``probe.c`` (tests feed a broken one); ``cgroup_id``
    (a cgroup v2 id, i.e. the inode number of its directory) also watches
    every task running in that cgroup. Raises :class:`ProbeError`.
    Must be closed (:meth:`close`) to detach.
    """

    def __init__(self, *, text: str | None = None, cgroup_id: int = 0) -> None:
        # bcc itself is imported last: it maps LLVM and clang (about 60 MB of
        # RSS) for good, so not before every cheaper check has passed
        if importlib.util.find_spec("bcc") is None:
            raise ProbeError("no-bcc", "cannot import bcc (no module named 'bcc'); "
                             "run scripts/setup-bcc.sh")
        problem = bpf_privilege_problem()
        if problem:
            raise ProbeError("no-privilege", problem)
        headers = find_kernel_headers()
        if headers is None:
            raise ProbeError(
                "no-headers",
                "no kernel headers for BCC (set BCC_KERNEL_SOURCE or run scripts/setup-bcc.sh)",
            )
        try:
            import bcc
        except ImportError as e:
            raise ProbeError("no-bcc", f"cannot import bcc ({e}); run scripts/setup-bcc.sh") from e
        os.environ["BCC_KERNEL_SOURCE"] = headers
        src = PROGRAM.read_text() if text is None else text
        cflags = [
            f"-DMAX_CPUS={max(os.cpu_count() or 1, 1) + 64}",
            f"-DNSLOTS={HIST_BUCKETS}",
            f"-DCGROUP_ID={int(cgroup_id)}ULL",
            f"-DHAVE_PF_USER={int(tracepoint_exists('exceptions', 'page_fault_user'))}",
        ]
        try:
            self._bpf: Any = bcc.BPF(text=src.encode(), cflags=cflags)
        except Exception as e:  # bcc raises bare Exception for compile/attach
            msg = str(e)[:300]
            raise ProbeError("compile", f"BPF program failed to compile or attach: {msg}") from e
        self.have_faults = "HAVE_PF_USER=1" in " ".join(cflags)
        self._tgids: set[int] = set()
        self._last = time.monotonic_ns()
        self._run = _Credit()
        self._wait = _Credit()
        self._comms: dict[int, str] = {}
        self._prev_stats: dict[int, tuple[int, ...]] = {}
        self._prev_hist: dict[tuple[int, int], int] = {}

    # -- watched set ---------------------------------------------------------

    def set_tgids(self, tgids: Iterable[int]) -> None:
        """Make the watched process set ``tgids`` (diffed against the last
        call) and register their current threads; a pid without
        ``/proc/<pid>`` is watched in vain, without error."""
        want = {int(p) for p in tgids if int(p) > 0}
        wt, tids = self._bpf[b"watched_tgids"], self._bpf[b"tids"]
        for p in want - self._tgids:
            wt[wt.Key(p)] = wt.Leaf(1)
        gone = self._tgids - want
        for p in gone:
            with contextlib.suppress(KeyError):
                del wt[wt.Key(p)]
        if gone:
            for k, v in list(tids.items()):
                if v.value in gone:
                    with contextlib.suppress(KeyError):
                        del tids[k]
        self._tgids = want
        self.refresh_threads()

    def refresh_threads(self) -> None:
        """Add the threads listed under ``/proc/<pid>/task`` of every watched
        pid to the kernel's ``tids`` map and drop entries of exited threads."""
        tids, ws = self._bpf[b"tids"], self._bpf[b"watch_start"]
        known = {k.value: v.value for k, v in tids.items()}
        for p in self._tgids:
            try:
                listed = [int(t) for t in os.listdir(f"/proc/{p}/task")]
            except OSError:
                continue
            for t in listed:
                if t not in known:
                    # CLOCK_MONOTONIC, as bpf_ktime_get_ns: see watch_start in probe.c
                    ws[ws.Key(t)] = ws.Leaf(time.monotonic_ns())
                    tids[tids.Key(t)] = tids.Leaf(p)
                    known[t] = p
        for t, p in known.items():
            if not os.path.exists(f"/proc/{p}/task/{t}"):
                with contextlib.suppress(KeyError):
                    del tids[tids.Key(t)]

    # -- drain ---------------------------------------------------------------

    def drain(self) -> Drain:
        """Per-interval deltas of the kernel's cumulative per-thread counters;
        one :class:`ThreadStats` per watched thread (zeros for one that did
        not run), plus a last one for a thread that exited or stopped being
        watched, whose map entries are then deleted."""
        self.refresh_threads()
        b = self._bpf
        raw = {_int(k): v for k, v in b[b"stats"].items_lookup_batch()}
        hist_cum: dict[tuple[int, int], int] = {}
        for k, v in b[b"hist"].items_lookup_batch():
            key = (k.tid, min(k.slot, HIST_BUCKETS - 1))
            hist_cum[key] = hist_cum.get(key, 0) + _int(v)
        pre: dict[int, dict[str, int]] = {}
        for k, v in b[b"preempt"].items_lookup_and_delete_batch():
            d = pre.setdefault(k.tgid, {})
            c = _cstr(k.comm)
            d[c] = d.get(c, 0) + _int(v)
        oncpu = {k.value: v.value for k, v in b[b"oncpu"].items()}
        # threads with no sched event since the watch began: those in state R
        # have been on CPU all along (a runnable one would have been switched
        # in by now), so their slice so far counts from the watch start
        for k, v in b[b"watch_start"].items():
            if k.value not in oncpu and _state(k.value) == "R":
                oncpu[k.value] = v.value
        waiting = {k.value: v.ts for k, v in b[b"waiting"].items()}
        tids = {k.value: v.value for k, v in b[b"tids"].items()}
        now = time.monotonic_ns()
        wall = time.time_ns()
        interval, self._last = now - self._last, now

        zeros = (0,) * len(_COUNTERS)
        hist: dict[int, list[int]] = {}
        for (tid, slot), n in hist_cum.items():
            dn = n - self._prev_hist.get((tid, slot), 0)
            if dn:
                hist.setdefault(tid, [0] * HIST_BUCKETS)[slot] += dn
        out: list[ThreadStats] = []
        for tid in sorted(set(tids) | set(raw)):
            s = raw.get(tid)
            cum = tuple(int(getattr(s, f)) for f in _COUNTERS) if s is not None else zeros
            prev = self._prev_stats.get(tid, zeros)
            delta = dict(
                zip(_COUNTERS, (c - p for c, p in zip(cum, prev, strict=True)), strict=True)
            )
            if tid not in tids and not any(delta.values()):
                continue
            pid = s.tgid if s is not None and s.tgid else tids.get(tid, 0)
            comm = _cstr(s.comm) if s is not None else ""
            if comm:
                self._comms[tid] = comm
            else:
                comm = self._comms.get(tid) or _read_comm(pid, tid)
                self._comms[tid] = comm
            t = ThreadStats(pid=pid, tid=tid, comm=comm, hist=hist.get(tid, [0] * HIST_BUCKETS))
            t.run_ns = self._run.settle(
                tid, delta["run_ns"], s.last_run_start if s else 0, oncpu.get(tid), now
            )
            # a wait ends at a seen switch-in, or unseen (its slice then
            # counted in unseen_ns): either way its credit is taken back
            ended = max(s.last_wait_start, s.last_unseen_wait_start) if s else 0
            t.runq_wait_ns = self._wait.settle(
                tid, delta["runq_wait_ns"], ended, waiting.get(tid), now
            )
            t.voluntary, t.involuntary = delta["voluntary"], delta["involuntary"]
            t.migrations, t.faults = delta["migrations"], delta["faults"]
            t.switch_ins, t.no_start = delta["switch_ins"], delta["no_start"]
            t.no_slice_start, t.unseen_ns = delta["no_slice_start"], delta["unseen_ns"]
            out.append(t)
            self._prev_stats[tid] = cum
        self._prev_hist = hist_cum
        # final rows are out: forget threads that left the watched set
        for tid in [t for t in raw if t not in tids]:
            with contextlib.suppress(KeyError):
                del b[b"stats"][b[b"stats"].Key(tid)]
            self._prev_stats.pop(tid, None)
        wsm = b[b"watch_start"]
        for k in [k for k in wsm if k.value not in tids]:
            with contextlib.suppress(KeyError):
                del wsm[k]
        stale = [k for k in hist_cum if k[0] not in tids]
        hmap = b[b"hist"]
        for tid, slot in stale:
            with contextlib.suppress(KeyError):
                del hmap[hmap.Key(tid, slot)]
            self._prev_hist.pop((tid, slot), None)
        self._run.forget(tids)
        self._wait.forget(tids)
        for tid in [t for t in self._comms if t not in tids]:
            del self._comms[tid]
        top = {
            p: sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_PREEMPTORS]
            for p, d in pre.items()
        }
        return Drain(ts_ns=wall, interval_ns=interval, threads=out, preemptors=top)

    def close(self) -> None:
        """Detach the tracepoints and free the maps (idempotent)."""
        bpf, self._bpf = getattr(self, "_bpf", None), None
        if bpf is not None:
            bpf.cleanup()


def _state(tid: int) -> str:
    """Scheduler state letter of thread ``tid`` (``R``, ``S``, ...), ``""`` if gone.

    >>> _state(os.getpid())
    'R'
    """
    try:
        stat = Path(f"/proc/{tid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3]


def _read_comm(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return ""


def to_table(d: Drain, *, faults: bool = True) -> pa.Table:
    """SCHED_SAMPLE rows (``source="ebpf"``) for one :class:`Drain`.

    ``faults=False`` (no ``page_fault_user`` tracepoint) leaves
    ``minor_faults`` null; ``major_faults`` is always null.
    """
    cols: dict[str, list[object]] = {f.name: [] for f in SCHED_SAMPLE}
    for t in d.threads:
        cols["ts_ns"].append(d.ts_ns)
        cols["interval_ns"].append(d.interval_ns)
        cols["source"].append("ebpf")
        cols["pid"].append(t.pid)
        cols["tid"].append(t.tid)
        cols["comm"].append(t.comm or None)
        cols["runq_wait_ns"].append(t.runq_wait_ns)
        cols["run_ns"].append(t.run_ns)
        cols["voluntary_switches"].append(t.voluntary)
        cols["involuntary_switches"].append(t.involuntary)
        cols["migrations"].append(t.migrations)
        cols["minor_faults"].append(t.faults if faults else None)
        cols["major_faults"].append(None)
        cols["runq_hist_log2_ns"].append(t.hist)
        cols["top_preemptors"].append([c for c, _ in d.preemptors.get(t.pid, [])])
    return pa.Table.from_pydict(cols, schema=SCHED_SAMPLE)

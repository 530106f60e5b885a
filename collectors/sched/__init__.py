"""``sched`` collector: run-queue latency, context switches, migrations and
faults of the watched processes, from eBPF tracepoints or from ``/proc``.

Options (the ``[collectors.sched]`` config section, see ``sample.toml``):

=============  ========================================================
``source``     ``"auto"`` (default): eBPF when possible, else ``/proc``;
               ``"ebpf"``: eBPF or :class:`~collectors.sched.probe.ProbeError`;
               ``"proc"``: always ``/proc``
``interval_s`` seconds between ``collect()`` calls (default 1.0)
``cgroup``     ``null``, a cgroup directory (absolute, or relative to
               ``/sys/fs/cgroup``) or a cgroup v2 id: its processes are
               watched besides ``ctx.pids``
=============  ========================================================

eBPF is used when ``bcc`` imports, the process has ``CAP_BPF`` +
``CAP_PERFMON`` (or ``CAP_SYS_ADMIN``), kernel headers are found and the
program compiles and attaches; otherwise the collector falls back to
:class:`collectors.proc.sampler.ProcSampler` and says why once through
``ctx.log``. ``self.source`` is the backend in use (``"ebpf"`` or ``"proc"``).
Both emit :data:`exporter.schema.SCHED_SAMPLE` rows, one per watched thread
per interval, so :mod:`stream_analytics.sii` computes SII the same way.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.proc.sampler import ProcSampler
from collectors.sched.probe import ProbeError, SchedProbe, to_table

__all__ = ["ProbeError", "SchedCollector", "cgroup_target"]

_CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")


def cgroup_target(spec: object) -> tuple[int, Path | None]:
    """``(cgroup_id, directory)`` for the ``cgroup`` option.

    An ``int`` is a cgroup v2 id (no directory, so no ``cgroup.procs``); a
    string is a directory whose inode number is its v2 id. Raises
    ``ValueError`` naming the option when the directory does not exist.
    """
    if spec is None or spec == "":
        return 0, None
    if isinstance(spec, int):
        return spec, None
    p = Path(str(spec))
    cands = [p] if p.is_absolute() else [Path(r, p) for r in _CGROUP_ROOTS]
    for c in cands:
        if c.is_dir():
            return os.stat(c).st_ino, c
    raise ValueError(f"sched: option cgroup={spec!r}: no such cgroup directory")


def _cgroup_pids(d: Path | None) -> set[int]:
    if d is None:
        return set()
    try:
        return {int(x) for x in (d / "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return set()


@register("sched")
class SchedCollector:
    """Publishes one ``sched_sample`` batch per interval (see module doc).

    ``program`` replaces the BPF source text (tests feed a broken one).
    """

    name = "sched"
    follows_pids = True
    """Called at once when the watched pid set grows (see
    :attr:`exporter.pipeline.Pipeline.watched`), so a new process's threads
    are counted from then on, not from the next interval."""
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "source": str, "interval_s": float, "cgroup": (str, int), "proc_root": str}
    """Config keys (``[collectors.sched]``) and their types; see ``sample.toml``."""

    def __init__(self, ctx: CollectorContext, *, program: str | None = None) -> None:
        self.ctx = ctx
        self.interval_s = float(ctx.options.get("interval_s", 1.0))
        want = str(ctx.options.get("source", "auto"))
        if want not in ("auto", "ebpf", "proc"):
            raise ValueError(f"sched: option source={want!r}; expected auto, ebpf or proc")
        self._cgroup_id, self._cgroup_dir = cgroup_target(ctx.options.get("cgroup"))
        self._probe: SchedProbe | None = None
        self._proc: ProcSampler | None = None
        self.fallback_reason: str | None = None
        """Why eBPF is not in use (``None`` when it is, or ``source="proc"``)."""
        if want != "proc":
            try:
                self._probe = SchedProbe(text=program, cgroup_id=self._cgroup_id)
            except Exception as e:  # ProbeError, or anything bcc throws
                if want == "ebpf":
                    raise
                tag = e.reason if isinstance(e, ProbeError) else type(e).__name__
                self.fallback_reason = f"{tag}: {e}"
                ctx.log(f"sched: eBPF unavailable ({self.fallback_reason}); using /proc")
        if self._probe is None:
            self._proc = ProcSampler(str(ctx.options.get("proc_root", "/proc")))
        self.source = "ebpf" if self._probe is not None else "proc"
        self.errors = 0
        """``collect()`` calls that failed and returned nothing."""
        self._unseen = 0
        self._seq = itertools.count()
        self._run = f"sched-{ctx.host}-{uuid.uuid4().hex[:12]}"
        if self._probe is not None:
            self._probe.set_tgids(self._pids())

    def _pids(self) -> set[int]:
        return set(self.ctx.pids) | _cgroup_pids(self._cgroup_dir)

    def sample(self) -> pa.Table:
        """One interval's SCHED_SAMPLE table from the backend in use."""
        if self._probe is not None:
            self._probe.set_tgids(self._pids())
            d = self._probe.drain()
            self._unseen += sum(t.no_slice_start for t in d.threads)
            return to_table(d, faults=self._probe.have_faults)
        assert self._proc is not None
        return self._proc.sample(self._pids())

    def collect(self) -> Iterable[Emit]:
        """The batch gathered since the last call; ``[]`` when there is none
        or the backend failed (counted in :attr:`errors`, logged once)."""
        try:
            table = self.sample()
        except Exception as e:  # never let a vanished pid or map error escape
            self.errors += 1
            if self.errors == 1:
                self.ctx.log(f"sched: collect failed ({type(e).__name__}: {e}); continuing")
            return []
        if table.num_rows == 0:
            return []
        return [Emit("sched_sample", table, f"{self._run}:{next(self._seq)}")]

    def drops(self) -> dict[str, int]:
        """What the eBPF probe lost, by reason (exported as
        ``aaco_exporter_events_dropped_total{reason="sched_<reason>"}``).

        ``unseen_switch_in``: switch-outs whose switch-in the probe did not
        see (``ThreadStats.no_slice_start``), so that on-CPU slice and the
        run-queue wait before it are missing from ``run_ns`` and
        ``runq_wait_ns``: a thread's first slice when it is learnt at its
        first switch-out (cgroup watch, thread born between refreshes), and
        switch-ins that fire no ``sched:sched_switch`` (Firecracker VMs).
        Empty for the ``/proc`` backend, which loses nothing this way."""
        return {"unseen_switch_in": self._unseen} if self._probe is not None else {}

    def close(self) -> None:
        """Detach the eBPF program if one is attached (idempotent)."""
        if self._probe is not None:
            self._probe.close()

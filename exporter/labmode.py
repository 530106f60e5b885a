"""``capture --lab``: run the workload on a dedicated, pinned, clock-locked host.

Steps, in order (each says in one line why when the machine refuses it, and
the capture goes on):

``cpuset``   a child cgroup with its own ``cpuset.cpus``/``cpuset.mems`` and
             this process moved into it (``cgroup.procs`` moves every thread).
             cgroup v2 first: under the hierarchy root when we are root (uid 0),
             else under our own (delegated) cgroup; the root's
             ``cgroup.subtree_control`` gets ``+cpuset``. When the v2 hierarchy
             offers no ``cpuset`` controller (a hybrid host binds it to v1) the
             v1 ``cpuset`` hierarchy is used instead, saying so. On exit the
             process moves back and the child is removed.
``pin``      ``sched_setaffinity`` of the process and each of its threads to the
             CPUs (threads created later, e.g. ONNX Runtime's pool, inherit it);
             the previous affinity is restored on exit.
``cpufreq``  records each CPU's ``scaling_governor``/``scaling_driver``, the
             boost state (``cpufreq/boost``, ``intel_pstate/no_turbo``,
             ``amd_pstate/status``); it changes nothing.
``gpu_clocks``  when ``amd-smi`` or ``rocm-smi`` finds a GPU: records the
             performance level (rocm-smi ``--showperflevel --json``) and sets it
             to ``high`` (clocks held at their maximum DPM level: ``rocm-smi
             --setperflevel high`` / ``amd-smi set -g all --perf-level HIGH``);
             on exit it is set back to the recorded level (``auto`` when unknown).

Restoring runs in ``__exit__``: after a normal end, an exception,
``KeyboardInterrupt`` (SIGINT) and SIGTERM (turned into ``SystemExit`` while
lab mode is active). A SIGKILL cannot be caught: then ``rocm-smi
--setperflevel auto`` restores the clocks by hand.

CPUs: ``cpus`` given, else every CPU this process may use except the lowest
one when there are at least two (left to the system and other processes).
``capture --lab`` also gives ONNX Runtime one intra-op thread per lab CPU
(``ort_intra_op_threads`` in ``lab.json``), so its pool does not oversubscribe
the cpuset.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from collectors.gpu.runner import CliError, run_cli


@dataclass
class Step:
    """One lab step: done or not, and what happened (one line)."""

    name: str
    ok: bool
    detail: str


def parse_cpus(text: str) -> list[int]:
    """``"1,3-5"`` -> ``[1, 3, 4, 5]``; raises ``ValueError`` naming the bad part."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"CPU list {text!r}: {part!r} is not N or N-M") from None
        if b < a or a < 0:
            raise ValueError(f"CPU list {text!r}: bad range {part!r}")
        out.update(range(a, b + 1))
    if not out:
        raise ValueError(f"CPU list {text!r} names no CPU")
    return sorted(out)


def default_cpus() -> list[int]:
    """Every CPU this process may use except the lowest, when there are two or more."""
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[1:] if len(allowed) >= 2 else allowed


def _fmt_cpus(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


@dataclass
class LabMode:
    """Context manager; see the module doc. Paths are parameters for tests."""

    cpus: list[int] | None = None
    smi: str | None = None  # "amd-smi", "rocm-smi" or None: the first on PATH
    say: Callable[[str], None] = print
    mounts: Path = Path("/proc/self/mounts")
    self_cgroup: Path = Path("/proc/self/cgroup")
    sys_cpu: Path = Path("/sys/devices/system/cpu")
    steps: list[Step] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    _undo: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    _old_term: Any = None

    # ------------------------------------------------------------------ steps
    def _step(self, name: str, ok: bool, detail: str) -> None:
        self.steps.append(Step(name, ok, detail))
        self.say(f"lab {name}: {detail}")

    def _mounts(self) -> list[tuple[str, str, str]]:
        out = []
        for line in self.mounts.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4:
                out.append((parts[1], parts[2], parts[3]))
        return out

    def _own(self, hierarchy: str) -> str | None:
        """Our cgroup path in a hierarchy (``""`` = v2, else a v1 controller)."""
        for line in self.self_cgroup.read_text().splitlines():
            _id, ctrls, path = line.split(":", 2)
            if (hierarchy == "" and _id == "0" and ctrls == "") or \
                    (hierarchy and hierarchy in ctrls.split(",")):
                return path
        return None

    def _enter_cgroup(self, base: Path, back: Path, cpus: list[int], mems: str,
                      v1: bool) -> str:
        child = base / f"aaco-lab-{os.getpid()}"
        child.mkdir(exist_ok=True)
        self._undo.append(("cgroup rmdir", lambda: child.rmdir()))
        try:
            (child / "cpuset.cpus").write_text(_fmt_cpus(cpus))
            (child / "cpuset.mems").write_text(mems)
            (child / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            self._undo.pop()
            child.rmdir()
            raise

        def move_back() -> None:
            (back / "cgroup.procs").write_text(str(os.getpid()))

        self._undo.append(("cgroup move back", move_back))
        self.info["cgroup"] = str(child)
        return f"{'cgroup v1' if v1 else 'cgroup v2'} {child} cpuset.cpus={_fmt_cpus(cpus)}"

    def cpuset(self, cpus: list[int]) -> None:
        try:
            mounts = self._mounts()
            v2 = next((Path(m) for m, t, _ in mounts if t == "cgroup2"), None)
            why_v2 = "no cgroup v2 hierarchy is mounted"
            if v2 is not None:
                own = self._own("")
                base = v2 if os.geteuid() == 0 else v2 / (own or "/").lstrip("/")
                ctrls = (v2 / "cgroup.controllers").read_text().split()
                if "cpuset" in ctrls:
                    sub = base / "cgroup.subtree_control"
                    if "cpuset" not in sub.read_text().split():
                        sub.write_text("+cpuset")
                    mems = (base / "cpuset.mems.effective").read_text().strip() if (
                        base / "cpuset.mems.effective").exists() else "0"
                    back = v2 / (own or "/").lstrip("/")
                    self._step("cpuset", True, self._enter_cgroup(base, back, cpus, mems, False))
                    return
                why_v2 = (f"cgroup v2 at {v2} offers no cpuset controller (controllers: "
                          f"{' '.join(ctrls) or 'none'})")
            v1 = next((Path(m) for m, t, o in mounts
                       if t == "cgroup" and "cpuset" in o.split(",")), None)
            if v1 is None:
                self._step("cpuset", False, f"{why_v2}, and no cgroup v1 cpuset: skipped")
                return
            own = self._own("cpuset") or "/"
            back = v1 / own.lstrip("/")
            mems = (v1 / "cpuset.mems").read_text().strip() or "0"
            self._step("cpuset", True, f"{why_v2}; using the v1 cpuset hierarchy: "
                       + self._enter_cgroup(v1, back, cpus, mems, True))
        except OSError as e:
            self._step("cpuset", False, f"cannot set up a cgroup: {e.strerror or e} "
                       f"({getattr(e, 'filename', None) or ''}): skipped")

    def pin(self, cpus: list[int]) -> None:
        old = self.info["affinity_before"]
        try:
            tids = [int(t) for t in os.listdir("/proc/self/task")]
            for tid in tids:
                os.sched_setaffinity(tid, cpus)
        except OSError as e:
            self._step("pin", False, f"sched_setaffinity: {e.strerror or e}: skipped")
            return
        self._step("pin", True, f"{len(tids)} threads pinned to CPUs {_fmt_cpus(cpus)} "
                   f"(were {_fmt_cpus(old)})")

    def cpufreq(self) -> None:
        gov: dict[str, str] = {}
        drv: dict[str, str] = {}
        for d in sorted(self.sys_cpu.glob("cpu[0-9]*/cpufreq")):
            for name, out in (("scaling_governor", gov), ("scaling_driver", drv)):
                f = d / name
                if f.is_file():
                    out[d.parent.name] = f.read_text().strip()
        boost: dict[str, str] = {}
        for rel in ("cpufreq/boost", "intel_pstate/no_turbo", "amd_pstate/status"):
            f = self.sys_cpu / rel
            if f.is_file():
                boost[rel] = f.read_text().strip()
        self.info["cpufreq"] = {"governor": gov, "driver": drv, "boost": boost}
        if not gov:
            self._step("cpufreq", False, f"{self.sys_cpu}/cpu*/cpufreq is not exposed "
                       "(no cpufreq driver, e.g. a VM guest): governor and boost unknown")
            return
        self._step("cpufreq", True, f"governor {', '.join(sorted(set(gov.values())))}; "
                   f"boost {boost or 'not exposed'} (recorded, not changed)")

    def _find_smi(self) -> tuple[str, str] | None:
        for tool in ([self.smi] if self.smi else ["amd-smi", "rocm-smi"]):
            path = shutil.which(tool)
            if path:
                return tool, path
        return None

    def gpu_clocks(self) -> None:
        found = self._find_smi()
        if found is None:
            self._step("gpu_clocks", False, "neither amd-smi nor rocm-smi is on PATH: "
                       "no GPU clocks to lock")
            return
        tool, path = found
        try:
            if tool == "rocm-smi":
                ids = json.loads(run_cli([path, "--showid", "--json"], 10.0))
                cards = sorted(k for k in ids if k.startswith("card"))
                if not cards:
                    raise CliError("cli_exit", f"{path} --showid --json lists no GPU")
                level = json.loads(run_cli([path, "--showperflevel", "--json"], 10.0))
                prior = {c: str(v.get("Performance Level", "auto")).lower()
                         for c, v in level.items() if c.startswith("card")}
                restore = sorted(set(prior.values())) if prior else ["auto"]
                back = restore[0] if len(restore) == 1 else "auto"
                run_cli([path, "--setperflevel", "high"], 30.0)
                undo = [path, "--setperflevel", back]
            else:
                gpus = json.loads(run_cli([path, "list", "--json"], 10.0))
                cards = [str(g.get("gpu", i)) for i, g in enumerate(gpus)] if isinstance(
                    gpus, list) else []
                if not cards:
                    raise CliError("cli_exit", f"{path} list --json lists no GPU")
                prior, back = {}, "AUTO"
                run_cli([path, "set", "-g", "all", "--perf-level", "HIGH"], 30.0)
                undo = [path, "set", "-g", "all", "--perf-level", "AUTO"]
        except (CliError, ValueError, AttributeError) as e:
            self._step("gpu_clocks", False, f"{tool}: {e}: clocks not locked")
            return

        def unlock() -> None:
            run_cli(undo, 30.0)

        self._undo.append(("gpu clocks", unlock))
        self.info["gpu_clocks"] = {"tool": tool, "gpus": cards, "prior_level": prior,
                                   "restore_level": back}
        self._step("gpu_clocks", True, f"{tool}: {len(cards)} GPU(s) set to perf level high "
                   f"(restored to {back} on exit)")

    # ------------------------------------------------------------- lifecycle
    def _on_term(self, signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    def __enter__(self) -> LabMode:
        self.info["started_ns"] = time.time_ns()
        cpus = self.cpus or default_cpus()
        self.info["cpus"] = cpus
        # restored last (undo runs newest first): moving cgroups resets affinity
        old = self.info["affinity_before"] = sorted(os.sched_getaffinity(0))
        self._undo.append(("affinity", lambda: os.sched_setaffinity(0, old)))
        try:
            self._old_term = signal.signal(signal.SIGTERM, self._on_term)
        except ValueError:  # not the main thread: SIGTERM is left as it is
            self._old_term = None
        try:
            self.cpuset(cpus)
            self.pin(cpus)
            self.cpufreq()
            self.gpu_clocks()
        except BaseException:
            self.restore()
            raise
        return self

    def restore(self) -> None:
        """Undo every step that changed something, newest first; each failure
        is reported in one line and the others still run."""
        while self._undo:
            name, fn = self._undo.pop()
            try:
                fn()
                self.steps.append(Step(f"restore {name}", True, "done"))
            except (OSError, CliError) as e:
                self._step(f"restore {name}", False, f"failed: {e}")
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.restore()

    def report(self) -> dict[str, Any]:
        """``lab`` section of ``env.json`` / ``lab.json``."""
        return {**self.info, "steps": [asdict(s) for s in self.steps],
                "definitions": "docs/lab-mode.md"}


def latency_cv(iterations: Any) -> float | None:
    """Coefficient of variation (population std / mean) of ITERATION_SPAN
    ``duration_ns``; None with fewer than 2 iterations."""
    import numpy as np

    d = np.asarray(iterations.column("duration_ns"), dtype=np.float64)
    if len(d) < 2 or d.mean() <= 0:
        return None
    return float(d.std() / d.mean())


def write_lab(out: Path, lab: LabMode) -> None:
    """``lab.json`` and the ``lab`` section of ``env.json`` in bundle ``out``."""
    from exporter.sinks.bundle import write_json

    rep = lab.report()
    write_json(out / "lab.json", rep)
    env_path = out / "env.json"
    env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    env["lab"] = rep
    write_json(env_path, env)

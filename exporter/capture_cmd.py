"""``aaco-exporter capture -- COMMAND ARGS``: profile any workload.

The command runs under ``rocprofv3 --kernel-trace --hip-runtime-trace
--output-format rocpd`` (a rocpd SQLite database, read once the command
has exited; CSV output is still read when the tool writes CSV) when
``rocprofv3`` is on ``PATH`` (else as is, with scheduler data only). While
it runs, the scheduler collector (``sched``: eBPF or /proc) watches its
whole process tree. When it exits, the kernel
traces rocprofv3 wrote are pushed through the same bus and analytics as
``replay`` (HIP launch API joined on the correlation id), and the same
session bundle is written, with the rocprof outputs kept under ``rocprof/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from collectors.base import CollectorContext, Emit, available, create
from collectors.rocprof.clock import ClockMapper
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import hip_api_table, load_paths
from collectors.rocprof.runner import (
    find_outputs,
    rocprofv3_available,
    rocprofv3_command,
    rocprofv3_output_format,
)
from exporter import schema
from exporter.bundle_dir import BundleDir
from exporter.bus import BusConfig
from exporter.instrument.llm import ENV_DIR
from exporter.llm_bundle import RAW, write_saved
from exporter.phases import Phases
from exporter.progress import bar
from exporter.session import Session, gpu_collector

if TYPE_CHECKING:
    from rich.progress import Progress


def descendants(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """``pid`` and every process below it (``/proc/<pid>/task/*/children``).

    Never raises: a process or thread that exits while it is being read
    simply contributes no children (``Path.glob`` raised
    ``FileNotFoundError`` when a task directory vanished mid-scan, which
    ended a capture with exit 2)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        tasks = proc / str(p) / "task"
        try:
            tids = os.listdir(tasks)
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError, ValueError):
                todo += [int(c) for c in (tasks / tid / "children").read_text().split()]
    return out


async def capture_command(cmd: Sequence[str], out_parent: Path, bus_cfg: BusConfig,
                          rocprofv3: str = "rocprofv3", sched_interval_s: float = 0.2,
                          pmc: Sequence[str] = (), phases: Phases | None = None,
                          progress: bool = False) -> tuple[Path, dict[str, Any], int]:
    """Run ``cmd``; returns the session dir, derived metrics and its exit status.

    ``phases`` collects the seconds per phase (``run``: the command, then
    ``parse``, ``bus``, ``analytics``, ``bundle``, ``trace`` of its rocprof
    outputs); ``progress`` shows a progress bar on stderr while they are read.

    Raises ``FileNotFoundError`` when the command cannot be started and
    :class:`exporter.bundle_dir.BundleWriteError` when the bundle cannot be
    written (it is written atomically: nothing is left behind).
    """
    with BundleDir() as bundle, bar(progress) as shown:
        _, derived, rc = await _capture_command(cmd, out_parent, bus_cfg, bundle, rocprofv3,
                                                sched_interval_s, pmc, phases or Phases(), shown)
    assert bundle.final is not None
    return bundle.final, derived, rc


async def _capture_command(cmd: Sequence[str], out_parent: Path, bus_cfg: BusConfig,
                           bundle: BundleDir, rocprofv3: str, sched_interval_s: float,
                           pmc: Sequence[str], phases: Phases,
                           shown: Progress | None) -> tuple[Path, dict[str, Any], int]:
    s = await Session.open("capture", bus_cfg, phases)
    s.progress = shown
    try:
        out = bundle.create(out_parent / f"{s.id}_{schema.sanitize_token(Path(cmd[0]).name)}")
    except BaseException:
        await s.close()
        raise
    prof_dir = out / "rocprof"
    prof_dir.mkdir(parents=True, exist_ok=True)
    use_rocprof = rocprofv3_available(rocprofv3)
    # rocpd (ROCm >= 7.0's default), or CSV from a rocprofv3 that has no rocpd
    fmt = rocprofv3_output_format(rocprofv3) if use_rocprof else "csv"
    argv = (rocprofv3_command(prof_dir, cmd, rocprofv3=rocprofv3, output_format=fmt, pmc=pmc)
            if use_rocprof else list(cmd))
    pids: set[int] = set()
    sched = create("sched" if "sched" in available() else "proc",
                   CollectorContext(s.host, pids, {"interval_s": sched_interval_s}))
    s.pipe.add(sched)
    gpu = gpu_collector(s.host, pids)
    stop = asyncio.Event()
    gpu_task = None
    if gpu is not None:  # GPU gauges into telemetry/gauges.parquet, polled on their own
        s.pipe.add(gpu)
        gpu_task = asyncio.create_task(s.pipe.run_collector(gpu, stop))
    rejects = Rejects()
    clock = ClockMapper()
    try:
        t0 = time.time_ns()
        child = await asyncio.create_subprocess_exec(  # generate spans -> llm/ (docs/llm.md)
            *argv, env={**os.environ, ENV_DIR: str(out / RAW)})
        pids.add(child.pid)
        await s.pipe.collect_once(sched)  # prime
        with phases.time("run"):
            while child.returncode is None:
                pids.update(descendants(child.pid))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(child.wait(), sched_interval_s)
                await s.pipe.collect_once(sched)
                await s.consumer.step(timeout=0.01)
        rc = int(child.returncode)
        t1 = time.time_ns()
        stop.set()
        if gpu_task is not None:
            await gpu_task  # its last poll is published before the drain
        outputs = find_outputs(prof_dir)

        def to_wall(emit: Emit) -> pa.RecordBatch:
            # rocprof's boot-relative clock -> wall clock, told by the child's run window
            return (clock(emit.batch, (t0, t1)) if emit.signal in ("kernel_span", "iteration_span")
                    else emit.batch)

        await s.publish(load_paths(outputs, rejects), to_wall)
        with phases.time("parse"):  # load_paths counted bad rows
            hip_api = hip_api_table(outputs, offset_ns=clock.offset_ns)
        final = str(bundle.final)  # argv as recorded names the bundle's final path
        derived = await s.write_trace_bundle(
            out, {"kind": "command", "command": list(cmd),
                  "argv": [x.replace(str(out), final) for x in argv],
                  "rocprofv3": use_rocprof, "exit_status": rc, "rocprof_clock": clock.clock,
                  "rocprof_clock_offset_ns": clock.offset_ns}, rejects, hip_api)
    finally:
        stop.set()
        if gpu_task is not None and not gpu_task.done():
            gpu_task.cancel()
        await s.close()
        s.sink.discard()
    llm = write_saved(out)
    if llm is not None:
        derived["llm"] = llm
    if use_rocprof:  # counters in rocprofv3's output (e.g. --pmc via ROCPROF_* config)
        from exporter.roofline import write_roofline

        roof = write_roofline(out, [prof_dir], rejects=rejects)
        if roof is not None:
            derived["roofline_bound"] = roof[0]["summary"]["bound"]
            if roof[1] is not None:
                derived["bottleneck"] = roof[1]["class"]
    return out, derived, rc

"""A collector with ``follows_pids`` (sched, proc) is called as soon as the
watched pid set grows, not at the end of its interval: the real ``proc``
collector on a real busy child process, a real nats-server. Counts of
``collect()`` calls are asserted, never durations."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pyarrow as pa

from collectors.base import CollectorContext, Emit, create
from exporter.bus import BusConfig
from exporter.natsserver import EmbeddedNats
from exporter.pipeline import Pipeline
from tests.support import die_with_parent


class Finder:
    """Stands in for discovery: adds ``pid`` to the watched set on its 3rd
    call and removes it on a later call once ``gate()`` holds, as discovery
    does when a server starts and exits; ``removed_at`` is that call."""

    name, source, interval_s = "finder", "test", 0.01

    def __init__(self, pids: set[int], pid: int, gate: Callable[[], bool]) -> None:
        self.pids, self.pid, self.gate, self.calls = pids, pid, gate, 0
        self.removed_at = 0

    def collect(self) -> list[Emit]:
        self.calls += 1
        if self.calls == 3:
            self.pids.add(self.pid)
        elif self.calls > 3 and not self.removed_at and self.gate():
            self.pids.discard(self.pid)
            self.removed_at = self.calls
        return []

    def close(self) -> None:
        return None


async def _until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def test_a_grown_watch_set_calls_the_scheduler_collector_at_once(
        nats_server: EmbeddedNats) -> None:
    """With a one-hour proc interval: one call at start, one more when the
    finder adds a busy child's pid (``early_collects`` 1), none when it
    removes it or calls again without a change; the next sample then has the
    child's threads with their run time since that early call."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=die_with_parent)
    try:
        async def go() -> None:
            pids: set[int] = set()
            pipe = Pipeline("follows", BusConfig(url=nats_server.url), watched=pids)
            await pipe.open()
            proc = create("proc", CollectorContext("follows", pids, {"interval_s": 3600},
                                                   lambda _: None))
            # removed once proc has sampled it (its early call), and not before
            finder = Finder(pids, child.pid, lambda: pipe.health["proc"].calls >= 2)
            pipe.add(proc)
            pipe.add(finder)  # type: ignore[arg-type]
            stop = asyncio.Event()
            tasks = [asyncio.create_task(pipe.run_collector(c, stop))
                     for c in (proc, finder)]
            await _until(lambda: bool(finder.removed_at) and finder.calls >= finder.removed_at + 10,
                         "finder removed the pid and made 10 more calls")
            stop.set()
            await asyncio.gather(*tasks)
            assert pipe.health["proc"].calls == 2
            assert pipe.early_collects == 1
            pids.add(child.pid)
            (emit,) = proc.collect()
            t = emit.batch
            assert isinstance(t, pa.Table)
            mine = t.filter(pa.compute.equal(t.column("pid"), child.pid))
            assert mine.num_rows >= 1
            assert sum(mine.column("run_ns").to_pylist()) > 0
            await pipe.close()

        asyncio.run(go())
    finally:
        child.kill()
        child.wait()


def test_without_a_watched_set_the_interval_alone_paces_collect(
        nats_server: EmbeddedNats) -> None:
    """A pipeline given no ``watched`` set (``capture``, ``replay``) calls a
    one-hour-interval proc collector once, however its pids change."""

    async def go() -> None:
        pids: set[int] = set()
        pipe = Pipeline("unwatched", BusConfig(url=nats_server.url))
        await pipe.open()
        proc = create("proc", CollectorContext("unwatched", pids, {"interval_s": 3600},
                                               lambda _: None))
        finder = Finder(pids, 1, lambda: True)
        pipe.add(proc)
        pipe.add(finder)  # type: ignore[arg-type]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(pipe.run_collector(c, stop)) for c in (proc, finder)]
        await _until(lambda: finder.calls >= 20, "finder made 20 calls")
        stop.set()
        await asyncio.gather(*tasks)
        assert (pipe.health["proc"].calls, pipe.early_collects) == (1, 0)
        await pipe.close()

    asyncio.run(go())


def test_collector_loops_leave_no_task_behind_when_stopped(nats_server: EmbeddedNats) -> None:
    """A ``follows_pids`` collector (proc) and a plain one, each looping on its
    interval, and the publisher: once ``stop`` is set and the loops return,
    no task is left but those before them (their stop and wake waiters are
    cancelled, not leaked)."""

    async def go() -> None:
        pids: set[int] = set()
        pipe = Pipeline("tasks", BusConfig(url=nats_server.url), watched=pids,
                        publish_interval_s=0.01)
        await pipe.open()
        proc = create("proc", CollectorContext("tasks", pids, {"interval_s": 0.01},
                                               lambda _: None))
        finder = Finder(pids, os.getpid(), lambda: False)
        pipe.add(proc)
        pipe.add(finder)  # type: ignore[arg-type]
        stop = asyncio.Event()
        before = asyncio.all_tasks()  # the test's and the NATS client's
        tasks = [asyncio.create_task(pipe.run_collector(c, stop)) for c in (proc, finder)]
        tasks.append(asyncio.create_task(pipe.run_publisher(stop)))
        await _until(lambda: finder.calls >= 20, "finder made 20 calls")
        stop.set()
        await asyncio.gather(*tasks)
        await asyncio.sleep(0)  # let cancelled waiters finish
        left = asyncio.all_tasks() - before
        assert not left, [t.get_coro() for t in left]
        assert pipe.early_collects >= 1  # the finder's 3rd call added this process
        await pipe.close()

    asyncio.run(go())

"""Run an iterator ahead in a worker thread (a parser overlapping the bus).

:func:`prefetch` starts a daemon thread at once that pulls items from an
iterator into a queue of at most ``depth`` items, so a producer whose work
releases the GIL (pyarrow's CSV reader, Parquet decoding) runs on another
core while the caller publishes and analyses the previous items. Until the
caller takes its first item the thread may run up to ``head_start`` items
ahead (a parser started before the rest of a command has been imported and
its bus opened), then at most ``depth``. Items come out in order; an
exception raised by the iterator is raised again in the caller at that
point; a caller that stops early (or drops the iterator without starting
it) stops the thread at its next item.

>>> list(prefetch(iter(range(5)), depth=2))
[0, 1, 2, 3, 4]
>>> list(prefetch(iter(range(5)), depth=1, head_start=3))
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Generator, Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()


class _Raised:
    def __init__(self, e: BaseException) -> None:
        self.e = e


def prefetch(it: Iterator[T], depth: int = 4, head_start: int = 0,
             name: str = "prefetch") -> Generator[T, None, None]:
    """``it``'s items, produced up to ``depth`` ahead (``head_start`` before the
    first is taken) in a daemon thread named ``name`` that starts now.
    ``close()`` on the result stops the thread and waits for it (its item
    in progress finishes first)."""
    q: queue.Queue[object] = queue.Queue(maxsize=max(depth, head_start))
    stop = threading.Event()

    def put(x: object) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for x in it:
                if not put(x):
                    return
        except BaseException as e:  # handed to the caller, raised there
            put(_Raised(e))
            return
        put(_END)

    th = threading.Thread(target=work, name=name, daemon=True)
    th.start()
    items: Generator[T, None, None] = _take(q, depth, stop, th)
    weakref.finalize(items, stop.set)  # dropped before its first item: no finally runs
    return items


def _take(q: queue.Queue[object], depth: int, stop: threading.Event,
          th: threading.Thread) -> Generator[T, None, None]:
    try:
        while True:
            x = q.get()
            if q.maxsize != depth:
                with q.mutex:  # the head start is used up: at most depth ahead from now on
                    q.maxsize = depth
            if x is _END:
                return
            if isinstance(x, _Raised):
                raise x.e
            yield x  # type: ignore[misc]
    finally:
        stop.set()
        th.join()

"""Run an iterator ahead in a worker thread (a parser overlapping the bus).

:func:`prefetch` pulls items from an iterator in a daemon thread into a
queue of at most ``depth`` items, so a producer whose work releases the GIL
(pyarrow's CSV reader, Parquet decoding) runs on another core while the
caller publishes and analyses the previous items. Items come out in order;
an exception raised by the iterator is raised again in the caller at that
point; a caller that stops early stops the thread at its next item.

>>> list(prefetch(iter(range(5)), depth=2))
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()


class _Raised:
    def __init__(self, e: BaseException) -> None:
        self.e = e


def prefetch(it: Iterator[T], depth: int = 4) -> Iterator[T]:
    """``it``'s items, produced up to ``depth`` ahead in a daemon thread."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
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

    th = threading.Thread(target=work, name="prefetch", daemon=True)
    th.start()
    try:
        while True:
            x = q.get()
            if x is _END:
                return
            if isinstance(x, _Raised):
                raise x.e
            yield x  # type: ignore[misc]
    finally:
        stop.set()
        th.join()

"""``exporter.prefetch.prefetch``: an iterator run ahead in a worker thread
(replay's parser overlapping the bus) keeps order, bounds how far it runs
ahead, re-raises the producer's error, and stops when the caller stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from exporter.prefetch import prefetch


def test_items_come_out_in_order_and_all_of_them() -> None:
    """10,000 items through a queue of depth 3: the same sequence."""
    assert list(prefetch(iter(range(10_000)), depth=3)) == list(range(10_000))


def test_the_producer_runs_at_most_depth_plus_one_items_ahead() -> None:
    """When the caller has taken k items the producer has made at most
    k + depth + 1 (depth queued, one waiting to be queued)."""
    made = [0]

    def gen() -> Iterator[int]:
        for i in range(200):
            made[0] += 1
            yield i

    ahead = []
    it = prefetch(gen(), depth=4)
    for k, _ in enumerate(it, start=1):
        ahead.append(made[0] - k)
    assert max(ahead) <= 4 + 1
    assert made[0] == 200


def test_an_error_of_the_producer_is_raised_in_the_caller_after_its_items() -> None:
    """The items before the error come out, then the producer's exception."""
    def gen() -> Iterator[int]:
        yield 1
        yield 2
        raise FileNotFoundError("replay: x does not exist")

    got = []
    with pytest.raises(FileNotFoundError, match="x does not exist"):
        for x in prefetch(gen(), depth=1):
            got.append(x)
    assert got == [1, 2]


def test_a_caller_that_stops_early_stops_the_thread() -> None:
    """Closing the generator after 3 of a million items: the worker thread
    (named as asked) is gone and the producer did not run to the end."""
    made = [0]

    def gen() -> Iterator[int]:
        for i in range(1_000_000):
            made[0] += 1
            yield i

    it = prefetch(gen(), depth=2, name="early-stop")
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    assert [t for t in threading.enumerate() if t.name == "early-stop"]
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "early-stop"]
    assert made[0] <= 3 + 2 + 2


def _wait_for(cond: object, seconds: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.005)
    return False


def test_a_head_start_runs_the_producer_ahead_until_the_first_item_is_taken() -> None:
    """With ``head_start=5`` and ``depth=1`` the producer makes 6 items (5
    queued, one waiting) before anything is taken, which depth 1 alone never
    allows; once that backlog is taken it leads by at most depth + 1 again."""
    made = [0]

    def gen() -> Iterator[int]:
        for i in range(100):
            made[0] += 1
            yield i

    it = prefetch(gen(), depth=1, head_start=5)
    assert _wait_for(lambda: made[0] >= 6)
    lead = [made[0] - k for k, _ in enumerate(it, start=1) if k >= 6]
    assert made[0] == 100
    assert max(lead) <= 1 + 1


def test_an_iterator_dropped_before_its_first_item_stops_its_thread() -> None:
    """The thread starts at once; when the caller drops the iterator without
    taking anything (a command that failed before reading), it ends."""
    import gc

    def gen() -> Iterator[int]:
        yield from range(1_000_000)

    before = {t for t in threading.enumerate() if t.name == "prefetch"}
    it = prefetch(gen(), depth=2)
    (worker,) = {t for t in threading.enumerate() if t.name == "prefetch"} - before
    del it
    gc.collect()
    worker.join(timeout=10)
    assert not worker.is_alive()

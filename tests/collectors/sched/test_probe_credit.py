"""The in-progress credit of ``collectors.sched.probe`` (pure Python, no BPF).

The sequences are the kernel's, in ns, written out by hand (synthetic): they
replay the CI failure of 2026-11-29, where a wait credited at a drain was then
ended by a switch-in that fired no ``sched_switch`` and the thread stopped,
so the credit was never taken back (728.9 ms reported against at most
724.5 ms of completed waits).
"""

from __future__ import annotations

from collectors.sched.probe import _Credit


def test_a_credited_wait_ended_unseen_is_taken_back_at_the_next_drain() -> None:
    """Drain 1 credits the open wait (start 1000) with 500; the wait then ends
    unseen (kernel: ``last_unseen_wait_start`` = 1000) and the thread stops
    with no wait open. Over the two drains the reported waits sum to the
    completed ones (300, then 600), not 300 + 500 + 600."""
    c = _Credit()
    reported = c.settle(1, 300, 200, 1000, 1500)  # 300 completed, wait since 1000 open
    reported += c.settle(1, 600, 1000, None, 2500)  # 600 more completed; 1000 ended unseen
    assert reported == 300 + 600
    assert c.ledger == {} and c.debt == {}


def test_a_take_back_larger_than_the_interval_is_carried_not_dropped() -> None:
    """When the interval that learns of the unseen end has less completed
    wait than the credit to take back, it reports 0 and the rest is owed by
    the next intervals: the sum stays exact and never goes negative."""
    c = _Credit()
    out = [c.settle(1, 0, 0, 1000, 1900)]  # 900 credited
    out.append(c.settle(1, 100, 1000, None, 2000))  # ended unseen; only 100 completed
    assert out == [900, 0] and c.debt == {1: 800}
    out.append(c.settle(1, 500, 1800, None, 3000))
    out.append(c.settle(1, 700, 2500, None, 4000))
    assert out == [900, 0, 0, 400]
    assert sum(out) == 100 + 500 + 700 and c.debt == {}


def test_a_wait_completed_at_a_seen_switch_in_keeps_its_credit_settled_as_before() -> None:
    """The ordinary path: a wait credited at a drain and completed at a seen
    switch-in reports its full length once over the two drains."""
    c = _Credit()
    first = c.settle(1, 0, 0, 1000, 1400)
    second = c.settle(1, 700, 1000, None, 2000)  # the 700 ns wait, completed
    assert (first, second) == (400, 300)


def test_forget_drops_the_debt_of_a_thread_no_longer_watched() -> None:
    """A thread that leaves the watched set takes its ledger and debt with it."""
    c = _Credit()
    c.settle(1, 0, 0, 1000, 1900)
    c.settle(1, 0, 1000, None, 2000)
    assert c.debt == {1: 900}
    c.forget([2])
    assert c.ledger == {} and c.debt == {}

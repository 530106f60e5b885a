"""``run``'s scheduler collector samples once per publish interval (its
counters are cumulative and samples wait for the publish anyway), unless
``[collectors.sched] interval_s`` says otherwise or samples are published at once."""

from __future__ import annotations

from exporter.daemon import DaemonOptions, _build_collectors


def _sched_interval(**kw: object) -> float:
    opts = DaemonOptions(watch="none", **kw)  # type: ignore[arg-type]
    built = _build_collectors(opts, set())
    try:
        got = [c for c in built if c.name in ("sched", "proc")]
        assert len(got) == 1
        return float(got[0].interval_s)
    finally:
        for c in built:
            c.close()


def test_sched_samples_once_per_publish_interval_by_default() -> None:
    """The default publish interval (5 s) is the sched interval; 8 s gives 8 s."""
    assert DaemonOptions().publish_interval_s == 5.0
    assert _sched_interval(collector_options={"sched": {"source": "proc"}}) == 5.0
    assert _sched_interval(publish_interval_s=8.0,
                           collector_options={"sched": {"source": "proc"}}) == 8.0


def test_config_interval_and_immediate_publishing_keep_their_own_rate() -> None:
    """``interval_s = 2`` in the config wins; ``--publish-interval 0`` keeps the
    collector's own default (1 s)."""
    assert _sched_interval(collector_options={"sched": {"source": "proc",
                                                        "interval_s": 2.0}}) == 2.0
    assert _sched_interval(publish_interval_s=0.0,
                           collector_options={"sched": {"source": "proc"}}) == 1.0

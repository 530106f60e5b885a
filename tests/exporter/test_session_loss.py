"""Session.loss names every way a session lost published data, so capture and
replay exit 2 instead of reporting success on a partial bundle."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from exporter.session import Session


def _loss(outbox: dict[str, int], sink: dict[str, int]) -> str | None:
    s = SimpleNamespace(bus=SimpleNamespace(outbox=SimpleNamespace(dropped=Counter(outbox))),
                        sink=SimpleNamespace(drops=Counter(sink)))
    return Session.loss(s)  # type: ignore[arg-type]


def test_a_complete_session_has_no_loss() -> None:
    """No outbox drop and no stream gap: None."""
    assert _loss({"outbox_full": 0}, {"bad_payload": 0}) is None


def test_a_stream_gap_in_the_bundle_sink_is_a_loss() -> None:
    """Messages the stream's retention deleted before the bundle sink read them
    are named, with their count."""
    line = _loss({}, {"stream_gap": 7})
    assert line is not None and "7 bus messages" in line and "stream_gap" in line


def test_outbox_drops_and_a_gap_are_both_named() -> None:
    """Both causes appear in the one line, the outbox's by reason."""
    line = _loss({"outbox_full": 3}, {"stream_gap": 2})
    assert line is not None and "3 outbox_full" in line and "2 bus messages" in line

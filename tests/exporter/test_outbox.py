"""The outbox store (:mod:`exporter.outbox`): order, spill, cap, spool."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exporter.outbox import NEVER_SENT, Held, Outbox


def _msg(i: int, size: int = 100, floor: int = NEVER_SENT) -> Held:
    return Held(f"aaco.v1.kernel_span.h{i % 3}", {"Nats-Msg-Id": f"k:{i}"},
                bytes([i % 256]) * size, floor)


def _take(ob: Outbox) -> list[str]:
    out = []
    while (m := ob.peek()) is not None:
        out.append(m.msg_id)
        ob.pop()
    return out


def test_order_is_kept_across_the_memory_to_spool_spill(tmp_path: Path) -> None:
    """Messages come out in put order when some are in memory and the rest in
    the spool, also when puts and takes interleave; the spool ends empty."""
    ob = Outbox(max_bytes=1 << 20, spool_dir=tmp_path / "spool", memory_bytes=1000)
    for i in range(30):
        assert ob.put(_msg(i))
    assert ob.spilled > 0 and len(list((tmp_path / "spool").glob("*.msg"))) == ob.spilled
    first = _take_n(ob, 12)
    for i in range(30, 40):  # the spool is not empty: these queue behind it on disk
        assert ob.put(_msg(i))
    rest = _take(ob)
    assert first + rest == [f"k:{i}" for i in range(40)]
    assert ob.held_bytes == 0 and len(ob) == 0
    assert list((tmp_path / "spool").iterdir()) == []
    spilled = ob.spilled
    assert ob.put(_msg(40)) and ob.spilled == spilled  # an empty outbox fills memory first


def _take_n(ob: Outbox, n: int) -> list[str]:
    out = []
    for _ in range(n):
        m = ob.peek()
        assert m is not None
        out.append(m.msg_id)
        ob.pop()
    return out


def test_payload_headers_and_floor_survive_the_spool(tmp_path: Path) -> None:
    """A spilled message reads back byte for byte, headers and floor included."""
    ob = Outbox(max_bytes=1 << 20, spool_dir=tmp_path, memory_bytes=0)
    m = Held("aaco.v1.iteration_span.h", {"Nats-Msg-Id": "a:0", "Aaco-Host": "h"},
             bytes(range(256)) * 3, floor=41)
    ob.put(m)
    assert ob.peek() == m


def test_cap_drops_new_messages_counted_by_reason_and_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Past max_bytes (memory plus spool) a message is dropped under
    ``outbox_full``; the warning is logged once however many are dropped; what
    was held before still comes out complete and in order."""
    size = _msg(0).size
    ob = Outbox(max_bytes=5 * size, spool_dir=tmp_path, memory_bytes=2 * size)
    with caplog.at_level(logging.WARNING, logger="aaco.outbox"):
        kept = [ob.put(_msg(i)) for i in range(9)]
    assert kept == [True] * 5 + [False] * 4
    assert ob.dropped == {"outbox_full": 4}
    assert ob.held_bytes == 5 * size
    assert sum("outbox_full" in r.getMessage() for r in caplog.records) == 1
    assert _take(ob) == [f"k:{i}" for i in range(5)]


def test_without_a_spool_the_cap_applies_to_memory(tmp_path: Path) -> None:
    size = _msg(0).size
    ob = Outbox(max_bytes=3 * size, spool_dir=None)
    assert [ob.put(_msg(i)) for i in range(4)] == [True, True, True, False]
    assert ob.dropped["outbox_full"] == 1 and _take(ob) == ["k:0", "k:1", "k:2"]


def test_a_persistent_spool_survives_a_restart_in_order(tmp_path: Path) -> None:
    """persist() at exit writes the memory part before the spilled part; a new
    Outbox on the same directory load()s all of them, oldest first, with the
    smallest ack floor, and goes on numbering after them."""
    spool = tmp_path / "outbox"
    ob = Outbox(max_bytes=1 << 20, spool_dir=spool, memory_bytes=350)
    for i in range(8):
        ob.put(_msg(i, floor=100 + i if i in (2, 5) else NEVER_SENT))
    assert 0 < ob.spilled < 8
    ob.persist()
    (spool / "0000000000000099.tmp").write_bytes(b"half a write")  # a crash mid-write
    again = Outbox(max_bytes=1 << 20, spool_dir=spool, memory_bytes=350)
    assert again.load() == 8
    assert again.min_floor == 102  # the smallest floor in the files
    assert not list(spool.glob("*.tmp"))
    again.put(_msg(8))
    assert _take(again) == [f"k:{i}" for i in range(9)]


def test_an_unreadable_spool_file_is_dropped_as_spool_error(tmp_path: Path) -> None:
    ob = Outbox(max_bytes=1 << 20, spool_dir=tmp_path, memory_bytes=0)
    ob.put(_msg(0))
    ob.put(_msg(1))
    (tmp_path / "0000000000000001.msg").write_bytes(b"\x00\x00\x00\xffnot json")
    again = Outbox(max_bytes=1 << 20, spool_dir=tmp_path)
    assert again.load() == 1
    assert again.dropped == {"spool_error": 1}
    assert _take(again) == ["k:1"]


def test_a_spool_that_cannot_be_written_drops_as_spool_error(tmp_path: Path) -> None:
    (tmp_path / "spool").write_text("a file, not a directory")
    ob = Outbox(max_bytes=1 << 20, spool_dir=tmp_path / "spool", memory_bytes=0)
    assert not ob.put(_msg(0))
    assert ob.dropped == {"spool_error": 1} and len(ob) == 0


def test_min_floor_is_the_smallest_floor_of_attempted_messages(tmp_path: Path) -> None:
    ob = Outbox(max_bytes=1 << 20, spool_dir=tmp_path)
    ob.put(_msg(0))
    assert ob.min_floor is None  # never attempted: cannot be in the stream
    ob.put(_msg(1, floor=7))
    ob.put(_msg(2, floor=5))
    ob.put(_msg(3, floor=9))
    assert ob.min_floor == 5
    _take(ob)
    assert ob.min_floor is None


def test_a_temporary_spool_is_made_at_the_first_spill_and_removed_by_cleanup() -> None:
    """No directory until something spills; cleanup() removes it; messages in
    a temporary spool are not kept by persist()."""
    ob = Outbox(max_bytes=1 << 20, memory_bytes=250, temp_spool=True)
    ob.put(_msg(0))
    assert ob.spool_dir is None
    ob.put(_msg(1))
    ob.put(_msg(2))
    spool = ob.spool_dir
    assert spool is not None and len(list(spool.glob("*.msg"))) == ob.spilled > 0
    assert ob.persist() == 0
    assert _take(ob) == ["k:0", "k:1", "k:2"]
    ob.cleanup()
    assert not spool.exists()


def test_an_attempt_cut_short_at_exit_keeps_its_floor_across_a_restart(tmp_path: Path) -> None:
    """A publish the drain began but never finished (attempted(), no failure
    recorded) keeps its ack floor in the spool's ``floor`` file."""
    ob = Outbox(max_bytes=1 << 20, spool_dir=tmp_path)
    ob.put(_msg(0))  # held without an attempt
    ob.attempted(50)  # the drain began publishing it when the process stopped
    ob.persist()
    again = Outbox(max_bytes=1 << 20, spool_dir=tmp_path)
    assert again.load() == 1 and again.min_floor == 50


def test_a_spool_file_lost_while_held_is_dropped_as_spool_error(tmp_path: Path) -> None:
    """peek() skips a spooled message whose file vanished, counting it."""
    ob = Outbox(max_bytes=1 << 20, spool_dir=tmp_path, memory_bytes=0)
    for i in range(3):
        ob.put(_msg(i))
    (tmp_path / "0000000000000002.msg").unlink()
    assert _take(ob) == ["k:0", "k:2"]
    assert ob.dropped == {"spool_error": 1} and ob.held_bytes == 0

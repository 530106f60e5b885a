"""``schema.SharedDecode``: a bus message decoded once for the in-process
readers of one stream, each reader given the same batch or the same error,
with the waiting entries bounded and nothing lost when a reader skips or
lags."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from exporter import schema


def _messages(n: int) -> list[schema.Message]:
    """``n`` kernel_span messages of 3 rows each, start times distinct per message."""
    out = []
    for i in range(n):
        t = pa.table({"start_ns": [10 * i, 10 * i + 1, 10 * i + 2],
                      "end_ns": [10 * i + 5] * 3, "duration_ns": [5, 4, 3],
                      "source": ["rocprof"] * 3, "kernel_name": ["k0", "k1", "k0"],
                      "kernel_family": ["gemm"] * 3})
        out.append(schema.encode("kernel_span", t, host="h1", msg_id=f"m:{i}"))
    return out


def _rows(i: int) -> list[int]:
    return [10 * i, 10 * i + 1, 10 * i + 2]


def test_the_second_reader_gets_the_first_readers_batch_and_the_entry_goes() -> None:
    """Reader 1 decodes message 7; reader 2 is handed the same batch object;
    nothing waits afterwards (one decode, one hit)."""
    m = _messages(1)[0]
    sd = schema.SharedDecode()
    one, two = sd.reader(), sd.reader()
    first = one(7, m.payload, m.headers)
    second = two(7, m.payload, m.headers)
    assert second[3] is first[3]
    assert first[:3] == ("kernel_span", schema.SCHEMA_VERSION, "h1")
    assert first[3].column("start_ns").to_pylist() == _rows(0)
    assert (sd.misses, sd.hits, len(sd)) == (1, 1, 0)


def test_a_bad_message_raises_the_same_error_for_every_reader() -> None:
    """A payload that is not Arrow IPC: each of three readers gets a
    SchemaError with reason bad_payload (each counts its own drop), decoded
    once."""
    m = _messages(1)[0]
    sd = schema.SharedDecode()
    for read in [sd.reader() for _ in range(3)]:
        with pytest.raises(schema.SchemaError) as e:
            read(1, b"not arrow", m.headers)
        assert e.value.reason == "bad_payload"
    assert (sd.misses, sd.hits, len(sd)) == (1, 2, 0)


def test_waiting_entries_are_bounded_and_a_reader_behind_still_gets_every_message() -> None:
    """Reader 1 takes 100 messages before reader 2 takes any: at most
    max_entries (8) wait; reader 2 then gets every message's own rows (the 8
    newest from the entries, the rest decoded again), and what it decodes
    is left for nobody: reader 1 is past it."""
    msgs = _messages(100)
    sd = schema.SharedDecode(max_entries=8)
    one, two = sd.reader(), sd.reader()
    for i, m in enumerate(msgs):
        one(i + 1, m.payload, m.headers)
        assert len(sd) <= 8
    for i, m in enumerate(msgs):
        assert two(i + 1, m.payload, m.headers)[3].column("start_ns").to_pylist() == _rows(i)
    assert (sd.hits, sd.misses, len(sd)) == (8, 192, 0)


def test_a_message_one_reader_skips_is_dropped_once_max_entries_are_newer() -> None:
    """Reader 2 never asks for message 1 (it filtered it out): its entry is
    dropped once max_entries newer ones wait, so it cannot pile up."""
    msgs = _messages(3)
    sd = schema.SharedDecode(max_entries=2)
    one, two = sd.reader(), sd.reader()
    for i, m in enumerate(msgs):
        one(i + 1, m.payload, m.headers)
    assert len(sd) == 2
    for i in (1, 2):
        two(i + 1, msgs[i].payload, msgs[i].headers)
    assert (len(sd), sd.hits, sd.misses) == (0, 2, 3)


def test_two_readers_in_threads_each_get_every_message_right() -> None:
    """Two threads take the same 300 messages at once, in order: every
    result holds that message's rows, every decode is accounted for (hits +
    misses = 600, at least one decode per message), and nothing is left
    waiting."""
    msgs = _messages(300)
    sd = schema.SharedDecode(max_entries=16)
    bad: list[int] = []
    start = threading.Barrier(2)

    def reader() -> None:
        read = sd.reader()
        start.wait()
        for i, m in enumerate(msgs):
            if read(i + 1, m.payload, m.headers)[3].column("start_ns").to_pylist() != _rows(i):
                bad.append(i)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert bad == []
    assert sd.hits + sd.misses == 600
    assert sd.misses >= 300
    assert len(sd) == 0


def test_one_reader_or_no_entries_decodes_every_time() -> None:
    """A single reader, or max_entries=0: a plain decode each time, nothing kept."""
    m = _messages(1)[0]
    alone = schema.SharedDecode()
    no_room = schema.SharedDecode(max_entries=0)
    for reads in ([alone.reader()] * 2, [no_room.reader(), no_room.reader()]):
        a = reads[0](1, m.payload, m.headers)
        b = reads[1](1, m.payload, m.headers)
        assert a[3] is not b[3] and a[3].equals(b[3])
    for sd in (alone, no_room):
        assert (sd.misses, sd.hits, len(sd)) == (2, 0, 0)

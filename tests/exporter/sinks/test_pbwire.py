"""``exporter.sinks.pbwire``: column-wise protobuf wire encoding. ``assemble``
lays out chosen rows, in a chosen order, as a reference built row by row in
Python would, and a varint message decodes with protobuf's own parser."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

from exporter.sinks import pbwire as w

_values = st.lists(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
                   min_size=1, max_size=30)


def _reference(groups: list[list[w.Part]], rows: np.ndarray) -> bytes:  # type: ignore[type-arg]
    """Row by row: each row's parts, ``data[i, :length[i]]``, back to back."""
    flat = [[bytes(p.data[i, :p.length[i]]) for p in g] for g in groups
            for i in range(len(g[0].length))]
    return b"".join(b"".join(flat[r]) for r in rows.tolist())


@st.composite
def _groups(draw: st.DrawFn) -> tuple[list[list[w.Part]], np.ndarray]:  # type: ignore[type-arg]
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        vals = np.array(draw(_values), dtype=np.int64)
        n = len(vals)
        masks = [None if draw(st.booleans()) else
                 np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
                 for _ in range(3)]
        g = [w.const(b"\x08\x01", n, masks[0]), w.varint(vals, masks[1], w.key(8, w.VARINT)),
             w.fixed64(vals, masks[2], w.key(47, w.I64_WIRE)),
             w.varint(np.abs(vals) % 100)]
        if draw(st.booleans()):
            g = w.message(11, g, masks[0])
        groups.append(g)
    total = sum(len(g[0].length) for g in groups)
    rows = np.array(draw(st.permutations(range(total))), dtype=np.int64)
    return groups, rows[: draw(st.integers(0, total))]


@settings(max_examples=300, deadline=None)
@given(_groups())
def test_assemble_equals_the_row_by_row_reference(
        case: tuple[list[list[w.Part]], np.ndarray]) -> None:  # type: ignore[type-arg]
    """Any parts (constants, varints, fixed64s, nested messages; masked or not)
    and any choice and order of rows: the bytes of the row-by-row reference."""
    groups, rows = case
    assert w.assemble(groups, rows) == _reference(groups, rows)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=(1 << 63) - 1), min_size=1, max_size=20))
def test_timestamp_varints_parse_back_with_protobuf(ts: list[int]) -> None:
    """``TracePacket.timestamp`` (field 8) encoded column-wise parses back with
    protobuf, one packet per row, in the chosen (reversed) order."""
    vals = np.array(ts, dtype=np.int64)
    msgs = w.message(1, [w.varint(vals, prefix=w.key(8, w.VARINT))])
    raw = w.assemble([msgs], np.arange(len(ts))[::-1])
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    got = [p.timestamp for p in Trace.FromString(raw).packet]
    assert got == ts[::-1]
    assert isinstance(Trace.FromString(raw).packet[0], TracePacket)


def test_varint_widths_at_every_7_bit_boundary_parse_back() -> None:
    """Values at each varint width boundary (2**(7k) - 1, 2**(7k), +1, and
    negative int64s: 10 bytes) mixed in one column: each packet's timestamp
    parses back with protobuf, and each varint has the width protobuf gives it."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    vals = [0, 1, 127]
    for k in range(1, 10):
        b = 1 << (7 * k)
        vals += [b - 1, b, b + 1]
    vals = [v for v in vals if v < 1 << 63] + [-1, -(1 << 63)]
    col = np.array(vals, dtype=np.int64)
    part = w.varint(col)
    assert part.length.tolist() == [len(TracePacket(timestamp=v % (1 << 64)).SerializeToString())
                                    - 1 for v in vals]
    raw = w.assemble([w.message(1, [w.varint(col, prefix=w.key(8, w.VARINT))])],
                     np.arange(len(vals)))
    assert [p.timestamp for p in Trace.FromString(raw).packet] == [v % (1 << 64) for v in vals]


def test_a_column_of_one_varint_width_takes_the_one_width_path_and_parses_back() -> None:
    """A column whose values all have the same varint width (found from its
    minimum and maximum, with no per-row search) encodes each width from 1 to
    10 bytes as protobuf does: lengths and values parse back."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    for k in range(1, 11):
        lo = 0 if k == 1 else 1 << (7 * (k - 1))
        hi = (1 << min(7 * k, 64)) - 1
        vals = [v - (1 << 64) if v >= 1 << 63 else v for v in (lo, (lo + hi) // 2, hi)]
        col = np.array(vals, dtype=np.int64)
        assert w.varint(col).length.tolist() == [k] * 3, k
        raw = w.assemble([w.message(1, [w.varint(col, prefix=w.key(8, w.VARINT))])],
                         np.arange(3))
        assert [p.timestamp for p in Trace.FromString(raw).packet] == \
            [v % (1 << 64) for v in vals], k


@settings(max_examples=100, deadline=None)
@given(_values, st.binary(min_size=0, max_size=5), st.booleans())
def test_constant_bytes_joined_to_a_key_equal_them_as_a_part_of_their_own(
        vals: list[int], before: bytes, masked: bool) -> None:
    """``message(..., before=b)`` and a varint with a longer ``prefix`` (the
    parts a constant field is folded into) give the bytes of the constant as
    a part of its own, then the field: one part fewer, the same message
    (``before`` is absent where the field is)."""
    col = np.array(vals, dtype=np.int64)
    mask = np.arange(len(vals)) % 2 == 0 if masked else None
    inner = [w.varint(col, prefix=w.key(9, w.VARINT) + b"\x01" + w.key(11, w.VARINT))]
    split_inner = [w.const(w.key(9, w.VARINT) + b"\x01", len(vals)),
                   w.varint(col, prefix=w.key(11, w.VARINT))]
    joined = w.message(1, [w.varint(col, prefix=w.key(8, w.VARINT)),
                           *w.message(11, inner, mask, before=before)])
    split = w.message(1, [w.varint(col, prefix=w.key(8, w.VARINT)),
                          w.const(before, len(vals), mask), *w.message(11, split_inner, mask)])
    rows = np.arange(len(vals))[::-1]
    assert w.assemble([joined], rows) == w.assemble([split], rows) == _reference([split], rows)


def test_a_prefix_longer_than_7_bytes_is_refused() -> None:
    """A varint's prefix shares its first word with the value: at most 7 bytes."""
    with pytest.raises(ValueError, match="8 bytes"):
        w.varint(np.arange(3), prefix=b"\x08" * 8)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, (1 << 56) + 5, (1 << 63) - 1, -1])
def test_a_column_of_one_value_is_a_constant_part_with_each_rows_varint(value: int) -> None:
    """A varint column holding one value on every row (a category id, the
    length of same-shaped messages) becomes a constant part (stride 0, no
    per-row work) whose rows are the prefix and that value's varint, absent
    where masked."""
    n = 5
    mask = np.array([True, False, True, True, False])
    p = w.varint(np.full(n, value, dtype=np.int64), mask, w.key(3, w.VARINT))
    assert p.words.strides[1] == 0
    one = w.key(3, w.VARINT) + w.varint_bytes(value % (1 << 64))
    assert [bytes(p.data[i, :p.length[i]]) for i in range(n)] == [
        one if m else b"" for m in mask.tolist()]
    assert w.assemble([[p]], np.arange(n)) == one * int(mask.sum())

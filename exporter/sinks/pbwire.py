"""Columnar protobuf wire encoding: one encoded message per row, built with numpy.

A message under construction is a list of :class:`Part` s, each one field's
bytes for every row, held as little-endian 64-bit words: ``words``
(``uint64``, shape ``[k, n]``, word ``j`` of every row contiguous) holds row
``i``'s bytes in the first ``length[i]`` bytes of ``words[0, i]``,
``words[1, i]``, ... (``data``: the ``[n, 8 k]`` bytes); a part absent on a
row has length 0 there (``mask``). Fields are made column-wise
(:func:`varint`, :func:`fixed64`, :func:`const`), 7-bit groups spread into
bytes with whole-word shifts; nested messages by :func:`message` (a
length-delimited field whose length is the sum of its parts' lengths, so
nothing is copied until the end); and :func:`assemble` writes chosen rows,
in a chosen order, as one buffer (the layout of a ``repeated`` message
field). It lays each message out in a row-major staging buffer with room to
spare after each row, one 8-byte store per word and row (a strided store
while every row's offset is the same), then copies the rows to their
offsets in the output, one scatter per row length. Encoding as in
https://protobuf.dev/programming-guides/encoding/ .

Used by :mod:`exporter.sinks.perfetto_slices` to write the millions of
identically shaped slice packets of a Perfetto trace without one Python
object per packet. Supports the varint, 64-bit and length-delimited wire types.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_LOW56 = np.uint64((1 << 56) - 1)
_CONT = 0x8080808080808080
# continuation bits of a varint of k bytes (index k): bytes 0..k-2 of the
# first word, and byte 8 (the 9th) of the second when k is 10
_CONT0 = np.array([((1 << (8 * min(max(k - 1, 0), 8))) - 1) & _CONT for k in range(11)],
                  dtype=np.uint64)
_CONT1 = np.array([0x80 if k == 10 else 0 for k in range(11)], dtype=np.uint64)
_SPREAD = [(np.uint64(keep), np.uint64(move), np.uint64(by)) for keep, move, by in (
    (0x0FFFFFFF, 0x00FFFFFFF0000000, 4),
    (0x00003FFF00003FFF, 0x0FFFC0000FFFC000, 2),
    (0x007F007F007F007F, 0x3F803F803F803F80, 1))]
"""``(keep, move, shift)`` steps of :func:`_spread`."""

VARINT, I64_WIRE, LEN = 0, 1, 2


@dataclass
class Part:
    """``n`` byte strings: row ``i`` is the first ``length[i]`` bytes of its
    little-endian words ``words[:, i]`` (``words``: ``[k, n]`` ``uint64``; a
    row stride of 0 makes a word constant). Bytes past a row's length are
    not written."""

    words: U64
    length: I64

    @property
    def data(self) -> U8:
        """The bytes as ``[n, 8 k]``: row ``i`` is ``data[i, :length[i]]``."""
        w = np.ascontiguousarray(self.words.T, dtype="<u8")
        return w.view(np.uint8).reshape(w.shape[0], 8 * w.shape[1])


def key(field: int, wire: int) -> bytes:
    """The encoded key (tag) of ``field`` with wire type ``wire``."""
    return varint_bytes((field << 3) | wire)


def varint_bytes(v: int) -> bytes:
    """One unsigned varint (``v`` >= 0)."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v < 1:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _mask(length: I64, mask: Mask | None) -> I64:
    return length if mask is None else np.where(mask, length, 0)


def _const_words(b: bytes, n: int) -> U64:
    """``[ceil(len(b) / 8), n]`` words of ``b`` on every row (stride 0)."""
    k = max(1, -(-len(b) // 8))
    ws = [int.from_bytes(b[8 * j:8 * j + 8], "little") for j in range(k)]
    return np.broadcast_to(np.array(ws, dtype="<u8")[:, None], (k, n))


def _prepend(prefix: bytes, words: list[U64], width: int) -> U64:
    """``[k, n]`` words of ``prefix`` followed by the ``width`` bytes in ``words``
    (a prefix of 1 to 7 bytes; the bytes are shifted across word boundaries)."""
    p = len(prefix)
    n = len(words[0])
    if not p:
        return np.stack(words) if len(words) > 1 else words[0][None, :]
    if p > 7:
        raise ValueError(f"a prefix of {p} bytes (at most 7)")
    k = -(-(p + width) // 8)
    s, r = np.uint64(8 * p), np.uint64(64 - 8 * p)
    out = np.empty((k, n), dtype="<u8")
    np.left_shift(words[0], s, out=out[0])
    out[0] |= np.uint64(int.from_bytes(prefix, "little"))
    for i in range(1, k):
        np.right_shift(words[i - 1], r, out=out[i])
        if i < len(words):
            out[i] |= words[i] << s
    return out


def _spread(v: U64, w: int) -> U64:
    """The 7-bit groups of each ``v`` (< 2^(7 w), ``w`` <= 8) one per byte,
    little-endian: the varint's bytes without their continuation bits."""
    if w <= 3:  # a shift and a mask per byte
        x = v & np.uint64(0x7F)
        for j in range(1, w):
            x |= ((v >> np.uint64(7 * j)) & np.uint64(0x7F)) << np.uint64(8 * j)
        return x
    # 28 bits into each 32-bit half, 14 into each 16-bit quarter, 7 into each byte
    for keep, move, by in _SPREAD:
        v = (v & keep) | ((v & move) << by)
    return v


def const(b: bytes, n: int, mask: Mask | None = None) -> Part:
    """The same bytes ``b`` on each of ``n`` rows (empty where ``mask`` is False)."""
    return Part(_const_words(b, n), _mask(np.full(n, len(b), dtype=np.int64), mask))


def varint(values: npt.NDArray[np.integer], mask: Mask | None = None,
           prefix: bytes = b"") -> Part:
    """``prefix`` (a field key) then the varint of each value (int64 taken as
    two's-complement uint64, as protobuf encodes a negative ``int64``). A
    column of one value is a :func:`const` part (no per-row work)."""
    a = np.asarray(values)
    v = a.view(np.uint64) if a.dtype == np.int64 else a.astype(np.uint64, copy=False)
    n = v.shape[0]
    if n == 0:
        return Part(np.zeros((1, 0), dtype="<u8"), np.zeros(0, dtype=np.int64))
    # one width for every row (ids, timestamps and uuids of a chunk mostly are):
    # found from the extremes, with no per-row width search
    least, most = int(v.min()), int(v.max())
    if least == most:  # one value on every row (a category, a length): a constant
        return const(prefix + varint_bytes(least), n, mask)
    lo, w = _width(least), _width(most)
    if lo == w:
        nb = np.full(n, w, dtype=np.int64)
    else:
        nb = np.searchsorted(_LIMITS, v, side="right").astype(np.int64) + 1
    if w <= 8:
        words = [_spread(v, w)]
    else:
        hi = v >> np.uint64(56)  # 8 bits: one or two more bytes
        words = [_spread(v & _LOW56, 8), _spread(hi, 2)]
    if w > 1:  # a continuation bit on all but the last byte
        k = w if lo == w else nb  # one width: one constant for every row
        words[0] |= _CONT0[k]
        if w == 10:
            words[1] |= _CONT1[k]
    return Part(_prepend(prefix, words, w), _mask(nb + len(prefix), mask))


def _width(v: int) -> int:
    """Bytes of the varint of ``v`` (0 <= v < 2**64)."""
    return max(1, (v.bit_length() + 6) // 7)


def fixed64(values: npt.NDArray[np.integer], mask: Mask | None = None,
            prefix: bytes = b"") -> Part:
    """``prefix`` then each value as 8 little-endian bytes."""
    v = np.asarray(values).astype("<u8")
    n = v.shape[0]
    return Part(_prepend(prefix, [v], 8), _mask(np.full(n, len(prefix) + 8, dtype=np.int64), mask))


def length(parts: Sequence[Part]) -> I64:
    """Bytes per row of a message made of ``parts``."""
    out = np.zeros(len(parts[0].length), dtype=np.int64)
    for p in parts:
        out += p.length
    return out


def message(field: int, parts: Sequence[Part], mask: Mask | None = None,
            before: bytes = b"") -> list[Part]:
    """``field`` (length-delimited) holding the message made of ``parts``;
    absent where ``mask`` is False. ``before``: bytes of the enclosing
    message that precede the field, written with its key in one part (the
    two together at most 7 bytes), and so absent with it."""
    if mask is not None:
        parts = [Part(p.words, np.where(mask, p.length, 0)) for p in parts]
    return [varint(length(parts), mask, before + key(field, LEN)), *parts]


def _words_at(buf: U8, offset: int, count: int, stride: int) -> U64:
    """``count`` (unaligned) 64-bit words of ``buf``, at ``offset``, ``stride`` bytes apart."""
    return np.ndarray((count,), dtype="<u8", buffer=buf, offset=offset, strides=(stride,))


def _stage(parts: Sequence[Part], sub: npt.NDArray[np.intp] | None,
           row_len: I64) -> tuple[U8, int]:
    """The chosen rows (``sub``, or all) of one message laid out row-major,
    ``pitch`` bytes a row: ``(buffer, pitch)``, row ``i``'s bytes at
    ``buffer[i * pitch:][:row_len[i]]``. Each part's words are stored at
    each row's next offset, 8 bytes a store; the bytes a store writes past
    its part are overwritten by the next parts, or fall into the room left
    after the row (``pitch`` exceeds the longest row by the widest part's
    words)."""
    m = len(row_len)
    pitch = int(row_len.max()) + 8 * max(p.words.shape[0] for p in parts)
    buf = np.empty(m * pitch, dtype=np.uint8)
    off = 0  # the same offset on every row, until a part's length varies
    offs: I64 | None = None  # then each row's byte in buf
    flat: U64 | None = None
    for p in parts:
        plen = p.length if sub is None else p.length[sub]
        lo, hi = int(plen.min()), int(plen.max())
        if hi == 0:
            continue
        words = p.words
        if sub is not None:  # a constant's words need no gather
            words = words[:, sub] if words.strides[1] else words[:, :m]
        for j in range(-(-hi // 8)):
            if offs is None:
                _words_at(buf, off + 8 * j, m, pitch)[...] = words[j]
            else:
                if flat is None:
                    flat = _words_at(buf, 0, len(buf) - 7, 1)
                flat[offs + 8 * j] = words[j]
        if offs is None and lo == hi:
            off += lo
        elif offs is None:
            offs = np.arange(m, dtype=np.intp) * pitch + off + plen
        else:
            offs = offs + plen
    return buf, pitch


def assemble(groups: Sequence[Sequence[Part]], rows: npt.NDArray[np.integer]) -> memoryview:
    """The bytes of the chosen messages back to back (a view of the buffer
    they were written to: no copy into a ``bytes``).

    ``groups`` are messages with ``n_g`` rows each; ``rows`` indexes their
    rows as if the groups were stacked (group 0's rows first). Each chosen
    row's offset in the output is the running sum of the chosen rows'
    lengths. Each group's chosen rows are laid out in a staging buffer
    (:func:`_stage`), then copied to their offsets: one scatter of items as
    wide as a row, per distinct row length."""
    sizes = [len(g[0].length) for g in groups]
    total_rows = sum(sizes)
    idx = np.asarray(rows, dtype=np.intp)
    row_len = np.zeros(total_rows, dtype=np.int64)
    r0 = 0
    for g, n in zip(groups, sizes, strict=True):
        row_len[r0:r0 + n] = length(g)
        r0 += n
    chosen_len = row_len[idx]
    ends = np.cumsum(chosen_len)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    start = np.full(total_rows, -1, dtype=np.int64)
    start[idx] = ends - chosen_len
    r0 = 0
    for g, n in zip(groups, sizes, strict=True):
        pos = start[r0:r0 + n]
        glen = row_len[r0:r0 + n]
        r0 += n
        sub: npt.NDArray[np.intp] | None = None
        if not (pos >= 0).all():  # rows of this group that are not chosen
            sub = np.flatnonzero(pos >= 0)
            pos, glen = pos[sub], glen[sub]
        if len(pos) == 0 or int(glen.max()) == 0:
            continue
        buf, pitch = _stage(g, sub, glen)
        counts = np.bincount(glen)
        for size in np.flatnonzero(counts).tolist():
            if size == 0:
                continue
            items = np.ndarray((len(pos),), dtype=f"V{size}", buffer=buf, strides=(pitch,))
            dest = np.ndarray((len(out) - size + 1,), dtype=f"V{size}", buffer=out,
                              strides=(1,))
            if counts[size] == len(pos):
                dest[pos] = items
            else:
                which = np.flatnonzero(glen == size)
                dest[pos[which]] = items[which]
    return out.data

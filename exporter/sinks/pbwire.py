"""Columnar protobuf wire encoding: one encoded message per row, built with numpy.

A message under construction is a list of :class:`Part` s, each one field's
bytes for every row: ``cols`` (``uint8``, shape ``[width, n]``, byte ``j``
of every row contiguous) holds row ``i``'s bytes in ``cols[:length[i], i]``
(``data``: the ``[n, width]`` view); a part absent on a row has length 0
there (``mask``). Fields are made column-wise (:func:`varint`,
:func:`fixed64`, :func:`const`), nested messages by :func:`message` (a
length-delimited field whose length is the sum of its parts' lengths, so
nothing is copied until the end), and :func:`assemble` writes chosen rows,
in a chosen order, as one ``bytes`` (the layout of a ``repeated`` message
field): each row's offset in the output is computed first, then every byte
column of every part is scattered to its rows' offsets at once. Encoding as in
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
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
_SHIFTS = np.arange(10, dtype=np.uint64) * np.uint64(7)
_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)

VARINT, I64_WIRE, LEN = 0, 1, 2


@dataclass
class Part:
    """``n`` byte strings: row ``i`` is ``cols[:length[i], i]`` (``cols``:
    ``[width, n]``; a column of stride 0 along the rows is a constant)."""

    cols: U8
    length: I64

    @property
    def data(self) -> U8:
        """The bytes as ``[n, width]``: row ``i`` is ``data[i, :length[i]]``."""
        return self.cols.T


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


def _with_prefix(prefix: bytes, body: U8) -> U8:
    """``[len(prefix) + w, n]``: the prefix's bytes on every row, then ``body``."""
    if not prefix:
        return body
    p, n = len(prefix), body.shape[1]
    cols = np.empty((p + body.shape[0], n), dtype=np.uint8)
    cols[:p] = np.frombuffer(prefix, dtype=np.uint8)[:, None]
    cols[p:] = body
    return cols


def const(b: bytes, n: int, mask: Mask | None = None) -> Part:
    """The same bytes ``b`` on each of ``n`` rows (empty where ``mask`` is False)."""
    cols = np.broadcast_to(np.frombuffer(b, dtype=np.uint8)[:, None], (len(b), n))
    return Part(cols, _mask(np.full(n, len(b), dtype=np.int64), mask))


def varint(values: npt.NDArray[np.integer], mask: Mask | None = None,
           prefix: bytes = b"") -> Part:
    """``prefix`` (a field key) then the varint of each value (int64 taken as
    two's-complement uint64, as protobuf encodes a negative ``int64``)."""
    a = np.asarray(values)
    v = a.view(np.uint64) if a.dtype == np.int64 else a.astype(np.uint64, copy=False)
    n = v.shape[0]
    if n == 0:
        return Part(_with_prefix(prefix, np.zeros((1, 0), np.uint8)),
                    np.zeros(0, dtype=np.int64))
    # one width for every row (ids, timestamps and uuids of a chunk mostly are):
    # found from the extremes, with no per-row width search
    lo, w = (_width(int(x)) for x in (v.min(), v.max()))
    if lo == w:
        nb = np.full(n, w, dtype=np.int64)
    else:
        nb = np.searchsorted(_LIMITS, v, side="right").astype(np.int64) + 1
    if w == 1:  # every value below 128: one byte each
        body = v.astype(np.uint8)[None, :]
    else:
        body = ((v[None, :] >> _SHIFTS[:w, None]) & np.uint64(0x7F)).astype(np.uint8)
        if lo == w:  # one width: a continuation bit on all but the last byte
            body[:-1] |= np.uint8(0x80)
        else:
            body |= np.where(np.arange(w)[:, None] < (nb - 1)[None, :], np.uint8(0x80),
                             np.uint8(0))
    return Part(_with_prefix(prefix, body), _mask(nb + len(prefix), mask))


def _width(v: int) -> int:
    """Bytes of the varint of ``v`` (0 <= v < 2**64)."""
    return max(1, (v.bit_length() + 6) // 7)


def fixed64(values: npt.NDArray[np.integer], mask: Mask | None = None,
            prefix: bytes = b"") -> Part:
    """``prefix`` then each value as 8 little-endian bytes."""
    v = np.ascontiguousarray(np.asarray(values).astype("<u8"))
    n, p = v.shape[0], len(prefix)
    body = v.view(np.uint8).reshape(n, 8).T
    return Part(_with_prefix(prefix, body), _mask(np.full(n, p + 8, dtype=np.int64), mask))


def length(parts: Sequence[Part]) -> I64:
    """Bytes per row of a message made of ``parts``."""
    out = np.zeros(len(parts[0].length), dtype=np.int64)
    for p in parts:
        out += p.length
    return out


def message(field: int, parts: Sequence[Part], mask: Mask | None = None) -> list[Part]:
    """``field`` (length-delimited) holding the message made of ``parts``;
    absent where ``mask`` is False."""
    if mask is not None:
        parts = [Part(p.cols, np.where(mask, p.length, 0)) for p in parts]
    return [varint(length(parts), mask, key(field, LEN)), *parts]


def assemble(groups: Sequence[Sequence[Part]], rows: npt.NDArray[np.integer]) -> bytes:
    """The bytes of the chosen messages back to back.

    ``groups`` are messages with ``n_g`` rows each; ``rows`` indexes their
    rows as if the groups were stacked (group 0's rows first). Each chosen
    row's offset in the output is the running sum of the chosen rows'
    lengths; then each part's byte column ``j`` goes to its rows' offsets
    plus ``j`` in one scatter (rows where the part is shorter than ``j + 1``
    bytes left out; none to leave out for a part present in full on every
    row: a constant, a fixed64, a varint of one width), and the offsets move
    on by the part's lengths. A part absent on every row is skipped."""
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
        r0 += n
        sub: npt.NDArray[np.intp] | None = None
        if not (pos >= 0).all():  # rows of this group that are not chosen
            sub = np.flatnonzero(pos >= 0)
            pos = pos[sub]
        if len(pos) == 0:
            continue
        at = pos.copy()  # each chosen row's next byte
        for p in g:
            plen = p.length if sub is None else p.length[sub]
            lo, hi = int(plen.min()), int(plen.max())
            if hi == 0:
                continue
            cols = p.cols
            const_cols = cols.strides[1] == 0
            for j in range(hi):
                col = cols[j, 0] if const_cols else (cols[j] if sub is None else cols[j, sub])
                if j < lo:
                    out[at + j] = col
                else:
                    on = plen > j
                    out[at[on] + j] = col if const_cols else col[on]
            at += plen
    return out.tobytes()

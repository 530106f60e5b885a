"""Columnar protobuf wire encoding: one encoded message per row, built with numpy.

A message under construction is a list of :class:`Part` s, each one field's
bytes for every row: ``data`` (``uint8``, shape ``[n, width]``) holds row
``i``'s bytes in ``data[i, :length[i]]``; a part absent on a row has length
0 there (``mask``). Fields are made column-wise (:func:`varint`,
:func:`fixed64`, :func:`const`), nested messages by :func:`message` (a
length-delimited field whose length is the sum of its parts' lengths, so
nothing is copied until the end), and :func:`assemble` writes chosen rows,
in a chosen order, as one ``bytes`` with a single gather (the layout of a
``repeated`` message field). Encoding as in
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
    """``n`` byte strings: row ``i`` is ``data[i, :length[i]]``."""

    data: U8
    length: I64


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


def const(b: bytes, n: int, mask: Mask | None = None) -> Part:
    """The same bytes ``b`` on each of ``n`` rows (empty where ``mask`` is False)."""
    data = np.broadcast_to(np.frombuffer(b, dtype=np.uint8), (n, len(b)))
    return Part(data, _mask(np.full(n, len(b), dtype=np.int64), mask))


def varint(values: npt.NDArray[np.integer], mask: Mask | None = None,
           prefix: bytes = b"") -> Part:
    """``prefix`` (a field key) then the varint of each value (int64 taken as
    two's-complement uint64, as protobuf encodes a negative ``int64``)."""
    v = np.asarray(values).astype(np.uint64, copy=False)
    n = v.shape[0]
    nb = np.ones(n, dtype=np.int64)
    for lim in _LIMITS:
        nb += v >= lim
    w = int(nb.max()) if n else 1
    p = len(prefix)
    data = np.empty((n, p + w), dtype=np.uint8)
    data[:, :p] = np.frombuffer(prefix, dtype=np.uint8)
    if w == 1:  # every value below 128: one byte each
        data[:, p] = v.astype(np.uint8)
    else:
        body = ((v[:, None] >> _SHIFTS[:w]) & np.uint64(0x7F)).astype(np.uint8)
        body |= np.where(np.arange(w) < (nb - 1)[:, None], np.uint8(0x80), np.uint8(0))
        data[:, p:] = body
    return Part(data, _mask(nb + p, mask))


def fixed64(values: npt.NDArray[np.integer], mask: Mask | None = None,
            prefix: bytes = b"") -> Part:
    """``prefix`` then each value as 8 little-endian bytes."""
    v = np.ascontiguousarray(np.asarray(values).astype("<u8"))
    n, p = v.shape[0], len(prefix)
    data = np.empty((n, p + 8), dtype=np.uint8)
    data[:, :p] = np.frombuffer(prefix, dtype=np.uint8)
    data[:, p:] = v.view(np.uint8).reshape(n, 8)
    return Part(data, _mask(np.full(n, p + 8, dtype=np.int64), mask))


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
        parts = [Part(p.data, np.where(mask, p.length, 0)) for p in parts]
    return [varint(length(parts), mask, key(field, LEN)), *parts]


def assemble(groups: Sequence[Sequence[Part]], rows: npt.NDArray[np.integer]) -> bytes:
    """The bytes of the chosen messages back to back.

    ``groups`` are messages with ``n_g`` rows each; ``rows`` indexes their
    rows as if the groups were stacked (group 0's rows first). Each row's
    parts are laid side by side in one padded array with a mask of the bytes
    in use; the chosen rows are taken in order and the mask compacts them.
    A part absent on every row is skipped, one present in full on every row
    (a constant, a fixed64, a varint of one width) marks its bytes without a
    comparison, and the others are compared straight into the mask."""
    sizes = [len(g[0].length) for g in groups]
    width = max(sum(p.data.shape[1] for p in g) for g in groups)
    total_rows = sum(sizes)
    src = np.zeros((total_rows, width), dtype=np.uint8)
    used = np.zeros((total_rows, width), dtype=bool)
    cols = np.arange(width, dtype=np.int64)
    r0 = 0
    for g, n in zip(groups, sizes, strict=True):
        c = 0
        for p in g:
            w = p.data.shape[1]
            lo, hi = (int(p.length.min()), int(p.length.max())) if n else (0, 0)
            if hi > 0:
                src[r0:r0 + n, c:c + w] = p.data
                if lo == w:
                    used[r0:r0 + n, c:c + w] = True
                else:
                    np.less(cols[:w], p.length[:, None], out=used[r0:r0 + n, c:c + w])
            c += w
        r0 += n
    idx = np.asarray(rows, dtype=np.intp)
    return bytes(src[idx][used[idx]].tobytes())

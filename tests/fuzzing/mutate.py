"""Mutations of real input files for the parser fuzz harness (stdlib only).

A *plan* is a list of ``(op, seed)`` pairs; :func:`apply` runs them in order on a
seed file's bytes, each op drawing its choices from ``random.Random(seed)``, so a
plan is a small, printable, reproducible recipe (hypothesis shrinks it; the
100k-case script draws it from one ``random.Random``).

Byte/line ops (:data:`BYTE_OPS`): ``flip`` (one bit), ``byte`` (one byte set to a
random value), ``truncate``, ``dup_line`` (row duplication), ``drop_line``,
``swap_lines``, ``swap_fields`` (two comma/colon separated fields of one line),
``wrong_type`` (a number becomes text), ``huge`` (a number becomes a huge, negative
or fractional one), ``nan`` (``NaN``/``inf``), ``empty_field``, ``unicode``
(non-ASCII, NUL, RTL, lone surrogates as UTF-8 bytes, invalid UTF-8), ``insert``
(random bytes), ``splice`` (a chunk copied elsewhere), ``empty`` (the file becomes
empty), ``nest`` (deeply nested brackets).

Structure-aware JSON ops (:func:`mutate_json`) change one node of a parsed
document: delete a key, a value of the wrong type, huge/NaN/negative numbers,
duplicate or empty lists, unicode strings, deep nesting.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any

_NUM = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

WEIRD_NUMBERS: tuple[bytes, ...] = (
    b"99999999999999999999999999", b"-1", b"-9223372036854775809", b"9223372036854775808",
    b"1e308", b"1e309", b"-1e309", b"0.5", b"1.7976931348623157e308", b"0", b"00", b"+7",
    b"0x1F", b"1_000", b"\xd9\xa3", b"3.", b".5", b"1e-400", b"18446744073709551616",
)
NAN_TOKENS: tuple[bytes, ...] = (b"NaN", b"nan", b"inf", b"-Infinity", b"Infinity", b"N/A")
UNICODE_BYTES: tuple[bytes, ...] = (
    "é".encode(), "\u202e".encode(), "💥".encode(), b"\x00", b"\xff\xfe", b"\xc3",
    b"\xed\xa0\x80", "\ufeff".encode(), b"\r", b"\n", b'"', b"'", b",", b"\\", b"\t",
    "名前".encode(), b"\x1b[31m",
)
WRONG_TYPES: tuple[bytes, ...] = (
    b"abc", b'"12"', b"true", b"null", b"[]", b"{}", b"[1,2]", b'{"a":1}', b"", b" ", b"-",
)


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _pick_number(data: bytes, r: random.Random) -> re.Match[bytes] | None:
    ms = list(_NUM.finditer(data))
    return r.choice(ms) if ms else None


def _replace_number(data: bytes, r: random.Random, pool: Sequence[bytes]) -> bytes:
    m = _pick_number(data, r)
    if m is None:
        return data + r.choice(pool)
    return data[: m.start()] + r.choice(pool) + data[m.end():]


def op_flip(data: bytes, r: random.Random) -> bytes:
    if not data:
        return data
    i = r.randrange(len(data))
    return data[:i] + bytes([data[i] ^ (1 << r.randrange(8))]) + data[i + 1:]


def op_byte(data: bytes, r: random.Random) -> bytes:
    if not data:
        return bytes([r.randrange(256)])
    i = r.randrange(len(data))
    return data[:i] + bytes([r.randrange(256)]) + data[i + 1:]


def op_truncate(data: bytes, r: random.Random) -> bytes:
    return data[: r.randrange(len(data) + 1)] if data else data


def op_dup_line(data: bytes, r: random.Random) -> bytes:
    ls = _lines(data)
    i = r.randrange(len(ls))
    ls[i:i] = [ls[i]] * r.choice((1, 1, 2, 50))
    return b"\n".join(ls)


def op_drop_line(data: bytes, r: random.Random) -> bytes:
    ls = _lines(data)
    del ls[r.randrange(len(ls))]
    return b"\n".join(ls)


def op_swap_lines(data: bytes, r: random.Random) -> bytes:
    ls = _lines(data)
    i, j = r.randrange(len(ls)), r.randrange(len(ls))
    ls[i], ls[j] = ls[j], ls[i]
    return b"\n".join(ls)


def op_swap_fields(data: bytes, r: random.Random) -> bytes:
    ls = _lines(data)
    i = r.randrange(len(ls))
    sep = b"," if b"," in ls[i] else b":"
    fs = ls[i].split(sep)
    if len(fs) > 1:
        a, b = r.randrange(len(fs)), r.randrange(len(fs))
        fs[a], fs[b] = fs[b], fs[a]
        if r.random() < 0.3:
            del fs[r.randrange(len(fs))]
        elif r.random() < 0.3:
            fs.insert(r.randrange(len(fs)), fs[r.randrange(len(fs))])
    ls[i] = sep.join(fs)
    return b"\n".join(ls)


def op_wrong_type(data: bytes, r: random.Random) -> bytes:
    return _replace_number(data, r, WRONG_TYPES)


def op_huge(data: bytes, r: random.Random) -> bytes:
    return _replace_number(data, r, WEIRD_NUMBERS)


def op_nan(data: bytes, r: random.Random) -> bytes:
    return _replace_number(data, r, NAN_TOKENS)


def op_empty_field(data: bytes, r: random.Random) -> bytes:
    return _replace_number(data, r, (b"", b'""', b" "))


def op_unicode(data: bytes, r: random.Random) -> bytes:
    i = r.randrange(len(data) + 1)
    return data[:i] + r.choice(UNICODE_BYTES) + data[i:]


def op_insert(data: bytes, r: random.Random) -> bytes:
    i = r.randrange(len(data) + 1)
    return data[:i] + r.randbytes(r.choice((1, 4, 16, 64))) + data[i:]


def op_splice(data: bytes, r: random.Random) -> bytes:
    if not data:
        return data
    a = r.randrange(len(data))
    chunk = data[a: a + r.choice((8, 64, 512))]
    i = r.randrange(len(data) + 1)
    return data[:i] + chunk + data[i:]


def op_empty(data: bytes, r: random.Random) -> bytes:
    return r.choice((b"", b"\n", b" ", b"\x00", data[:1]))


def op_nest(data: bytes, r: random.Random) -> bytes:
    depth = r.choice((50, 5000, 100_000))
    opener, closer = r.choice(((b"[", b"]"), (b'{"a":', b"}")))
    blob = opener * depth + b"1" + closer * depth
    i = r.randrange(len(data) + 1)
    return data[:i] + blob + data[i:]


BYTE_OPS = {
    "flip": op_flip, "byte": op_byte, "truncate": op_truncate, "dup_line": op_dup_line,
    "drop_line": op_drop_line, "swap_lines": op_swap_lines, "swap_fields": op_swap_fields,
    "wrong_type": op_wrong_type, "huge": op_huge, "nan": op_nan,
    "empty_field": op_empty_field, "unicode": op_unicode, "insert": op_insert,
    "splice": op_splice, "empty": op_empty, "nest": op_nest,
}
"""Byte/line mutation ops by name: ``f(data, rng) -> data``."""

Plan = list[tuple[str, int]]


def apply(data: bytes, plan: Plan) -> bytes:
    """``data`` after each ``(op, seed)`` of ``plan`` (ops of :data:`BYTE_OPS`)."""
    for op, seed in plan:
        data = BYTE_OPS[op](data, random.Random(seed))
    return data


def random_plan(r: random.Random, ops: Sequence[str] = tuple(BYTE_OPS),
                max_len: int = 4) -> Plan:
    """A plan of 1..``max_len`` ops (fewer is likelier), seeds from ``r``."""
    n = min(max_len, 1 + int(r.expovariate(1.0)))
    return [(r.choice(ops), r.randrange(1 << 32)) for _ in range(n)]


# -- structure-aware JSON ------------------------------------------------

_WRONG_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1.5, "", "abc", "N/A", [], {}, [1, 2], {"a": 1},
    10**30, -(10**30), 2**63, -(2**63) - 1, 1e308, float("nan"), float("inf"),
    float("-inf"), "1e999", "💥\u202e\x00", "\ud800",
)


def _nodes(doc: Any, path: tuple[Any, ...] = (), out: list[tuple[Any, ...]] | None = None,
           limit: int = 5000) -> list[tuple[Any, ...]]:
    """Paths of every container node (and leaf) of ``doc``, up to ``limit``."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    out.append(path)
    if isinstance(doc, dict):
        for k, v in doc.items():
            _nodes(v, (*path, k), out, limit)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:200]):
            _nodes(v, (*path, i), out, limit)
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def mutate_json(doc: Any, r: random.Random) -> Any:
    """A deep copy of ``doc`` with one node changed (see the module doc)."""
    doc = json.loads(json.dumps(doc))
    paths = _nodes(doc)
    path = r.choice(paths)
    if not path:
        return r.choice((*_WRONG_VALUES, [doc], {"x": doc}))
    parent, key = _get(doc, path[:-1]), path[-1]
    node = parent[key]
    op = r.randrange(8)
    if op == 0 and isinstance(parent, dict):
        del parent[key]
    elif op == 1 and isinstance(node, list) and node:
        node.extend([node[r.randrange(len(node))]] * r.choice((1, 3, 100)))
    elif op == 2 and isinstance(node, list | dict):
        parent[key] = type(node)()
    elif op == 3 and isinstance(node, int | float) and not isinstance(node, bool):
        parent[key] = r.choice((-node, node * 10**r.randrange(1, 30), node + 0.5, 2**64))
    elif op == 4 and isinstance(node, str):
        parent[key] = r.choice((node * 100, node + "💥", "", node[: len(node) // 2],
                                str(r.randrange(10**6))))
    elif op == 5:
        parent[key] = [node] if r.random() < 0.5 else {"v": node}
    else:
        parent[key] = r.choice(_WRONG_VALUES)
    return doc


def dumps(doc: Any, r: random.Random | None = None) -> bytes:
    """JSON bytes of ``doc`` (NaN/Infinity allowed, as Python and rocm-smi write them);
    with ``r``, sometimes pretty-printed."""
    indent = 4 if r is not None and r.random() < 0.5 else None
    return json.dumps(doc, indent=indent, allow_nan=True).encode("utf-8", "surrogatepass")

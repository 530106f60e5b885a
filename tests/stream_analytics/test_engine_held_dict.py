"""Held kernels keep ``model`` and ``kernel_family`` dictionary-encoded (no
string per kernel while they wait for an iteration span), with the same
results as plain strings, and a checkpoint written with plain strings loads."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pyarrow as pa

from stream_analytics.engine import Analytics

FAMILIES = ["gemm", "copy", None, "gemm", "elementwise", "copy"]


def _kernels(dictionary: bool, t0: int = 0) -> pa.Table:
    n = len(FAMILIES)
    fam = pa.array(FAMILIES, pa.string())
    model = pa.array(["m", None, "m", "m", None, "m"], pa.string())
    return pa.table({
        "model": model.dictionary_encode() if dictionary else model,
        "kernel_family": fam.dictionary_encode() if dictionary else fam,
        "pid": [7] * n, "start_ns": [t0 + 10 * i for i in range(n)],
        "end_ns": [t0 + 10 * i + 5 for i in range(n)], "duration_ns": [5] * n})


def _settled(eng: Analytics) -> list[dict[str, Any]]:
    eng.settle()
    rows = eng.results().to_pylist()
    for r in rows:
        r.pop("ts_ns", None)
    return rows


def test_held_kernels_are_dictionary_encoded_and_give_the_results_of_strings() -> None:
    """Kernels without an iteration wait as dictionary columns (nulls filled:
    model "", family "other"); settled, every result equals that of the same
    kernels sent as plain strings."""
    by_dict, by_str = Analytics(window_s=None), Analytics(window_s=None)
    for t0 in (0, 1000):
        by_dict.ingest("kernel_span", "h", _kernels(True, t0))
        by_str.ingest("kernel_span", "h", _kernels(False, t0))
    held = by_dict.joins[("h", 7)].held
    assert held is not None and held.num_rows == 12
    assert pa.types.is_dictionary(held.schema.field("model").type)
    assert held.column("kernel_family").cast(pa.string()).null_count == 0
    assert _settled(by_dict) == _settled(by_str)


def test_a_checkpoint_with_plain_string_held_kernels_loads() -> None:
    """A checkpoint written before held kernels were dictionary-encoded (their
    ``model`` and ``kernel_family`` as plain strings) restores them; new
    kernels join them, and they settle to the same results."""
    eng = Analytics(window_s=None)
    eng.ingest("kernel_span", "h", _kernels(True))
    state = eng.to_dict()
    old = copy.deepcopy(state)
    for j in old["joins"]:
        d = j[-1] if isinstance(j, list) else j
        raw = base64.b64decode(d["held"])
        with pa.ipc.open_stream(pa.py_buffer(raw)) as r:
            t = r.read_all()
        plain = pa.table({c: t.column(c).cast(pa.string()) if pa.types.is_dictionary(
            t.column(c).type) else t.column(c) for c in t.column_names})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, plain.schema) as w:
            w.write_table(plain)
        d["held"] = base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")
    assert old != state  # the held kernels really were rewritten
    restored = [Analytics.from_dict(d) for d in (old, state)]
    for e in restored:  # more kernels join those restored
        e.ingest("kernel_span", "h", _kernels(True, 1000))
    assert _settled(restored[0]) == _settled(restored[1])


def test_null_rows_of_a_dictionary_column_take_the_default_without_a_string_per_row() -> None:
    """``_dict_col`` keeps a dictionary column's codes and gives its null rows
    the default's code: reused when the dictionary has it, appended when not,
    whatever the index width; an all-null column (a GPU trace's ``model``)
    becomes one code of the default."""
    from stream_analytics.engine import _DICT, _dict_col

    has = pa.DictionaryArray.from_arrays(pa.array([0, None, 1, None], pa.int8()),
                                         pa.array(["a", ""]))
    got = _dict_col(pa.table({"m": has}), "m", "", 4)
    assert got.type == _DICT and got.to_pylist() == ["a", "", "", ""]
    assert got.dictionary.to_pylist() == ["a", ""]  # the default's code reused
    got = _dict_col(pa.table({"m": has}), "m", "other", 4)
    assert got.to_pylist() == ["a", "other", "", "other"]
    assert got.dictionary.to_pylist() == ["a", "", "other"]
    none = pa.DictionaryArray.from_arrays(pa.nulls(3, pa.int32()), pa.array([], pa.string()))
    got = _dict_col(pa.table({"m": none}), "m", "", 3)
    assert got.to_pylist() == ["", "", ""] and got.dictionary.to_pylist() == [""]

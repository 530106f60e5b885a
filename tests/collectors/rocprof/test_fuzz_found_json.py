"""Inputs the parser fuzzer found (benchmarks/fuzz_parsers.py) in the rocprofv3 JSON and
Kineto readers: each used to raise a raw OverflowError/TypeError/RecursionError/
UnicodeEncodeError/csv.Error; now the value is dropped and counted by reason, or the
file is rejected as ``bad_json``/``unknown_format`` naming it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from collectors.kineto.follow import TraceDirFollower
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths

TD = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"


def _v3() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((TD / "rocprofv3_results_synthetic.json").read_text())
    return doc


def _replay(tmp_path: Path, name: str, text: str) -> tuple[int, Rejects]:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    r = Rejects()
    rows = sum(e.batch.num_rows for e in load_paths([p], r) if e.signal == "kernel_span")
    return rows, r


def _first_dispatch(doc: dict[str, Any]) -> dict[str, Any]:
    d: dict[str, Any] = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][0]
    return d


def test_rocprofv3_json_timestamp_outside_int64_is_a_missing_value(tmp_path: Path) -> None:
    """start_timestamp 1e999 / Infinity / 2**64 was an OverflowError building the column."""
    base, _ = _replay(tmp_path, "base.json", json.dumps(_v3()))
    for bad in ("1e999", "Infinity", str(2**64)):
        doc = _v3()
        _first_dispatch(doc)["start_timestamp"] = 0  # placeholder, replaced as text below
        text = json.dumps(doc).replace('"start_timestamp": 0', f'"start_timestamp": {bad}', 1)
        rows, r = _replay(tmp_path, "results.json", text)
        assert rows == base - 1, bad
        assert r.counts == {"missing_value": 1}, bad


@pytest.mark.parametrize("where", ["agent_handle", "kernel_id", "symbol_id", "kinds"])
def test_rocprofv3_json_object_where_a_scalar_id_belongs_is_no_crash(
        tmp_path: Path, where: str) -> None:
    """An object/list as agent handle, kernel id or string table (TypeError: unhashable /
    not subscriptable) leaves that field unknown: a dispatch whose kernel name is then
    unknown is dropped as missing_value, every other one is kept."""
    doc = _v3()
    proc = doc["rocprofiler-sdk-tool"][0]
    base, _ = _replay(tmp_path, "base.json", json.dumps(doc))
    if where == "agent_handle":
        proc["agents"][0]["id"]["handle"] = {"a": 1}
    elif where == "kernel_id":
        _first_dispatch(doc)["dispatch_info"]["kernel_id"] = [10]
    elif where == "symbol_id":
        proc["kernel_symbols"][0]["kernel_id"] = {"x": []}
    else:
        proc["strings"]["buffer_records"] = 7
    rows, r = _replay(tmp_path, "results.json", json.dumps(doc))
    assert set(r.counts) <= {"missing_value"}
    assert rows + r.total == base
    assert rows == (base if where in ("agent_handle", "kinds") else base - r.total)


def test_rocprofv3_json_lone_surrogate_kernel_name_is_kept_replaced(tmp_path: Path) -> None:
    """A kernel name '\\ud800' (valid JSON escape, not encodable) was a UnicodeEncodeError."""
    doc = _v3()
    doc["rocprofiler-sdk-tool"][0]["kernel_symbols"][0]["formatted_kernel_name"] = "k\ud800"
    base, _ = _replay(tmp_path, "base.json", json.dumps(_v3()))
    rows, r = _replay(tmp_path, "results.json", json.dumps(doc))
    assert (rows, r.total) == (base, 0)


def test_csv_header_with_a_bare_carriage_return_is_unknown_format(tmp_path: Path) -> None:
    """A bare CR in the first line made csv.reader raise csv.Error in format detection."""
    rows, r = _replay(tmp_path, "kernel_trace.csv", "Kind,Agent\r_Id,x\n1,2,3\n")
    assert rows == 0
    assert r.counts == {"unknown_format": 1}


def _kineto(tmp_path: Path, text: str) -> tuple[int, Rejects]:
    p = tmp_path / "t.json"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    r = Rejects()
    f = TraceDirFollower(tmp_path, r, settle_s=0.0, log=lambda s: None)
    st = p.stat()
    emits = f._parse(p, (st.st_size, st.st_mtime_ns))
    return sum(e.batch.num_rows for e in emits if e.signal == "kernel_span"), r


def _kdoc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        gzip.decompress((TD / "mi250_minitoy_train_ROCm6_2_kineto.json.gz").read_bytes()))
    return doc


def test_kineto_deeply_nested_json_is_rejected_as_bad_json(tmp_path: Path) -> None:
    """'[[[[...' 100,000 deep was a RecursionError out of json.load."""
    rows, r = _kineto(tmp_path, "[" * 100_000 + "]" * 100_000)
    assert rows == 0
    assert r.counts == {"bad_json": 1}
    assert r.examples["bad_json"][0].startswith(str(tmp_path / "t.json"))


def test_kineto_infinite_or_huge_ts_drops_the_kernel(tmp_path: Path) -> None:
    """ts Infinity (OverflowError) or 1e30 us (int64 overflow) on a kernel: missing_value."""
    base, _ = _kineto(tmp_path, json.dumps(_kdoc()))
    for bad in ("Infinity", "1e30"):
        doc = _kdoc()
        k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
        k["ts"] = "@@TS@@"
        rows, r = _kineto(tmp_path, json.dumps(doc).replace('"@@TS@@"', bad))
        assert rows == base - 1, bad
        assert r.counts == {"missing_value": 1}, bad


@pytest.mark.parametrize("field", ["name", "cat"])
def test_kineto_object_as_event_name_or_cat_is_no_crash(tmp_path: Path, field: str) -> None:
    """A dict/list as a runtime call's name or an event's cat was 'unhashable type'."""
    base, _ = _kineto(tmp_path, json.dumps(_kdoc()))
    doc = _kdoc()
    call = next(e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime")
    call[field] = {"x": [1]}
    rows, r = _kineto(tmp_path, json.dumps(doc))
    assert rows == base
    assert "bad_json" not in r.counts

"""Inputs the parser fuzzer found (benchmarks/fuzz_parsers.py) in the GPU readers:
JSON nested past Python's recursion limit (RecursionError), sysfs files that are not
UTF-8 (UnicodeDecodeError), GPU indexes that are bools or outside int64 and strings
with lone surrogates (OverflowError/ArrowTypeError/UnicodeEncodeError building the
gauge batch). Now: ParseError ``bad_json``, a ``bad_value``/``bad_shape`` drop naming
the file or field, or text repaired, and the batch builds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from collectors.gpu import rows as R
from collectors.gpu.amd_smi import parse_metric, parse_static
from collectors.gpu.rocm_smi import parse_rocm_smi
from collectors.gpu.sysfs import read_sysfs

TD = Path(__file__).resolve().parents[3] / "collectors" / "gpu" / "testdata"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("parse", [parse_rocm_smi, parse_metric,
                                   lambda t: parse_static(t)[1]])
def test_json_nested_too_deeply_is_bad_json(parse: object) -> None:
    """'[[[[...' 100,000 deep: ParseError bad_json, not RecursionError."""
    with pytest.raises(R.ParseError, match="nested too deeply") as e:
        parse(DEEP)  # type: ignore[operator]
    assert e.value.reason == "bad_json"


def test_sysfs_file_that_is_not_utf8_is_a_bad_value(tmp_path: Path) -> None:
    """gpu_busy_percent holding b'\\xff37' was a UnicodeDecodeError out of read_sysfs."""
    root = tmp_path / "sys"
    shutil.copytree(TD / "sysfs_synthetic", root)
    base = read_sysfs(root)
    f = root / "class" / "drm" / "card0" / "device" / "gpu_busy_percent"
    f.write_bytes(b"\xff\xfe\n")
    res = read_sysfs(root)
    assert len(res.rows) == len(base.rows) - 1
    assert res.drops["bad_value"] == base.drops["bad_value"] + 1
    assert any(str(f) in m for _, m in res.errors)


def _metric_doc() -> dict[str, object]:
    doc: dict[str, object] = json.loads(
        (TD / "amd_smi_metric_gpu_data_synthetic.json").read_text())
    return doc


@pytest.mark.parametrize("index", [True, 2**70, -1])
def test_amd_smi_gpu_index_bool_or_out_of_range_is_bad_shape(index: object) -> None:
    """"gpu": true / 2**70 / -1 (ArrowTypeError / OverflowError in to_table): the GPU
    object is dropped as bad_shape naming the key."""
    doc = _metric_doc()
    gpus = doc["gpu_data"]
    assert isinstance(gpus, list)
    base = parse_metric(json.dumps(doc))
    gpus[0]["gpu"] = index
    res = parse_metric(json.dumps(doc))
    assert res.drops["bad_shape"] == base.drops["bad_shape"] + 1
    assert any("'gpu' key" in m for _, m in res.errors)
    R.to_table(res.rows, ts_ns=1, source="amd-smi")


def test_rocm_smi_card_number_out_of_range_is_bad_shape_or_ignored() -> None:
    """card99999999999 (an index beyond int64 once more digits) is ignored like any
    non-card key; card4294967296 (10 digits, beyond 2**31) is dropped as bad_shape."""
    ok = {"GPU use (%)": "37"}
    res = parse_rocm_smi(json.dumps({"card1": ok, "card4294967296": ok,
                                     "card" + "9" * 30: ok}))
    assert [r.gpu_index for r in res.rows] == [1]
    assert res.drops == {"bad_shape": 1}
    R.to_table(res.rows, ts_ns=1, source="rocm-smi")


def test_lone_surrogate_in_uuid_and_model_still_builds_the_batch() -> None:
    """"Unique ID": "\\ud800..." (a valid JSON escape) was a UnicodeEncodeError in to_table;
    the text is repaired and the reading kept."""
    doc = {"card0": {"GPU use (%)": "50", "Unique ID": "0x\ud800ab",
                     "Card Series": "MI\udc95"}}
    res = parse_rocm_smi(json.dumps(doc))
    b = R.to_table(res.rows, ts_ns=1, source="rocm-smi")
    assert b.num_rows == 1
    assert b.column("gpu_uuid")[0].as_py() == "0x?ab"

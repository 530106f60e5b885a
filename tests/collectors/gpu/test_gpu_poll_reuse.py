"""What a 1 Hz GPU poll reuses from the poll before, on real rocm-smi
recordings (collectors/gpu/testdata/PROVENANCE.md): the card plans of the
parser and the series columns of the table. Every reuse must give exactly
what the uncached path gives; a change of GPUs or readings must be seen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.gpu import rocm_smi
from collectors.gpu import rows as R
from collectors.gpu.rocm_smi import parse_rocm_smi

SMI = Path(__file__).parents[3] / "collectors" / "gpu" / "testdata" / "smi"
FIXTURES = ["telegraf/mi100_rocm602.json", "wandb/mi250_rocm_smi_all_rocm6.json",
            "telegraf/rx6700xt_rocm430.json", "torchserve/mi250_rocm_smi_metrics.json"]


def _unplanned(text: str) -> R.ParseResult:
    rocm_smi._CARD_PLANS.clear()
    return parse_rocm_smi(text)


@pytest.mark.parametrize("rel", FIXTURES)
def test_a_second_parse_with_the_card_plans_gives_the_same_rows(rel: str) -> None:
    """Parsing a real document with fresh card plans, then again with the plans
    the first parse left, gives equal rows (metric, value, unit, index, uuid,
    kind, attributes), drops and errors."""
    text = (SMI / rel).read_text()
    first = _unplanned(text)
    assert rocm_smi._CARD_PLANS  # the plans are kept
    again = parse_rocm_smi(text)
    assert again.rows == first.rows and first.rows
    assert (again.drops, again.errors) == (first.drops, first.errors)


def test_a_card_whose_readings_change_is_planned_again() -> None:
    """A card that loses a reading between polls (a sensor going N/A drops its
    key in some rocm-smi versions) loses exactly that row; one that gains a
    clock key keeps the first clock of each domain, as without plans."""
    doc = json.loads((SMI / "telegraf/mi100_rocm602.json").read_text())
    before = parse_rocm_smi(json.dumps(doc)).rows
    del doc["card0"]["Average Graphics Package Power (W)"]
    after = parse_rocm_smi(json.dumps(doc)).rows
    lost = [r for r in before if r not in after]
    assert [(r.metric, r.gpu_index, r.attr("sensor")) for r in lost] == [
        (R.POWER, 0, "average")]
    doc["card1"]["current_gfxclk (MHz)"] = "1502"  # a second spelling of sclk, after the first
    planned = parse_rocm_smi(json.dumps(doc)).rows
    assert planned == _unplanned(json.dumps(doc)).rows
    sclk = [r.value for r in planned if r.metric == R.CLOCK and r.gpu_index == 1
            and r.attr("clock") == "sclk"]
    assert sclk == [300e6]  # "sclk clock speed:": "(300Mhz)" comes first


@pytest.mark.parametrize("text,expected", [
    ("53.0", 53.0), ("0", 0.0), ("34342961152", 34342961152.0), (" 7 ", 7.0),
    ("1e3", 1000.0), ("(1402Mhz)", 1402.0), ("1_000", 1.0), ("N/A", None), ("", None)])
def test_parse_number_reads_plain_numbers_and_tool_text_alike(
        text: str, expected: float | None) -> None:
    """The plain-number fast path and the regular expression agree: text
    ``float`` reads is its value, ``1_000`` stays the regex's 1 (``float``
    would read 1000), missing spellings are None."""
    assert R.parse_number(text) == expected


@pytest.mark.parametrize("text", ["nan", "inf", "-Infinity", "n/a-ish"])
def test_parse_number_rejects_non_finite_and_numberless_text(text: str) -> None:
    """``float`` accepts ``nan`` and ``inf``; a reading never is one: ValueError."""
    if text == "n/a-ish":  # N/A... is the tools' missing spelling
        assert R.parse_number(text) is None
        return
    with pytest.raises(ValueError, match="not a number"):
        R.parse_number(text)


def test_the_table_cache_builds_what_to_table_builds_and_reuses_the_series() -> None:
    """Three polls of a real MI100 x4 document, values changed between them:
    each cached batch equals :func:`to_table` of the same rows; the 2nd and
    3rd reuse the series columns (``reused`` 2); a poll that loses one reading
    is built anew (``reused`` stays 2) and is still equal."""
    rows = parse_rocm_smi((SMI / "telegraf/mi100_rocm602.json").read_text()).rows
    cache = R.TableCache()
    for poll in range(3):
        polled = [r._replace(value=r.value + poll) for r in rows]
        got = cache.build(polled, ts_ns=10 + poll, source="rocm-smi")
        assert got.equals(R.to_table(polled, ts_ns=10 + poll, source="rocm-smi"))
    assert cache.reused == 2
    fewer = rows[1:]
    assert cache.build(fewer, ts_ns=20, source="rocm-smi").equals(
        R.to_table(fewer, ts_ns=20, source="rocm-smi"))
    assert cache.reused == 2
    assert cache.build(fewer, ts_ns=21, source="sysfs").equals(
        R.to_table(fewer, ts_ns=21, source="sysfs"))  # another source: not the same series
    assert cache.reused == 2

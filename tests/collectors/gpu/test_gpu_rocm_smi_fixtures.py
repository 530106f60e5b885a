"""rocm-smi --json parser on every real recorded fixture (testdata/smi/).

Expected values are derived by hand from the fixture strings: percent / 100,
"(NMhz)" * 1e6 Hz, W and degrees C unchanged, bytes unchanged, uJ / 1e6 J.
Each test compares the COMPLETE set of exported readings of the cards it
names, so an extra, missing or wrongly-converted reading fails it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.gpu import rows as R
from collectors.gpu.rocm_smi import parse_rocm_smi
from tests.collectors.gpu.readings import Key, readings

SMI = Path(__file__).parents[3] / "collectors" / "gpu" / "testdata" / "smi"


def parse(rel: str) -> R.ParseResult:
    return parse_rocm_smi((SMI / rel).read_text(), where=rel)


def mhz(n: float) -> float:
    return n * 1e6


def test_wandb_rocm6_mi250_all_fields_in_base_units() -> None:
    """MI250 GCD, ROCm 6 key names: temps incl. HBM, clocks, power, energy, replays."""
    res = parse("wandb/mi250_rocm_smi_all_rocm6.json")
    assert not res.drops
    # from the fixture strings:
    # "Temperature (Sensor edge) (C)": "43.0" ... "HBM 3": "52.0"; "(400Mhz)" fclk ...
    # "Accumulated Energy (uJ)": "4275228873299218.5" -> /1e6 = 4275228873.2992185 J
    assert readings(res, 0) == pytest.approx({
        (0, R.TEMPERATURE, "edge"): 43.0,
        (0, R.TEMPERATURE, "junction"): 44.0,
        (0, R.TEMPERATURE, "memory"): 53.0,
        (0, R.TEMPERATURE, "hbm_0"): 53.0,
        (0, R.TEMPERATURE, "hbm_1"): 50.0,
        (0, R.TEMPERATURE, "hbm_2"): 52.0,
        (0, R.TEMPERATURE, "hbm_3"): 52.0,
        (0, R.CLOCK, "fclk"): mhz(400),
        (0, R.CLOCK, "mclk"): mhz(1600),
        (0, R.CLOCK, "sclk"): mhz(800),
        (0, R.CLOCK, "socclk"): mhz(1090),
        (0, R.POWER_LIMIT, ""): 560.0,
        (0, R.POWER, "average"): 91.0,
        (0, R.UTILIZATION, "general"): 0.0,
        (0, R.UTILIZATION, "memory"): 0.0,  # "GPU Memory Read/Write Activity (%)": "0"
        (0, R.PCIE_REPLAYS, ""): 3824.0,
        (0, R.ENERGY, ""): 4275228873.2992185,
        (0, R.ACTIVITY, "general"): 387664097.0,  # "GFX Activity": "387664097"
        (0, R.ACTIVITY, "memory"): 647284295.0,  # "Memory Activity": "647284295"
    })
    row = res.rows[0]
    assert row.gpu_uuid == "0x1f9de0957d137942"  # "Unique ID"
    assert row.attr("model") == "AMD INSTINCT MI250 (MCM) OAM AC MBA"  # "Device Name"
    kinds = {r.metric: r.kind for r in res.rows}
    assert kinds[R.ENERGY] == kinds[R.PCIE_REPLAYS] == kinds[R.ACTIVITY] == R.COUNTER
    assert kinds[R.TEMPERATURE] == R.GAUGE


def test_wandb_rocm5_mi250_old_key_names() -> None:
    """ROCm 5 spellings ("GPU memory use (%)", "Card series") map to the same metrics."""
    res = parse("wandb/mi250_rocm_smi_all.json")
    # "Accumulated Energy (uJ)": "962825096297442.9" -> 962825096.2974429 J
    assert readings(res, 0) == pytest.approx({
        (0, R.TEMPERATURE, "edge"): 32.0,
        (0, R.TEMPERATURE, "junction"): 35.0,
        (0, R.TEMPERATURE, "memory"): 43.0,
        (0, R.TEMPERATURE, "hbm_0"): 43.0,
        (0, R.TEMPERATURE, "hbm_1"): 39.0,
        (0, R.TEMPERATURE, "hbm_2"): 42.0,
        (0, R.TEMPERATURE, "hbm_3"): 43.0,
        (0, R.CLOCK, "fclk"): mhz(400),
        (0, R.CLOCK, "mclk"): mhz(1600),
        (0, R.CLOCK, "sclk"): mhz(800),
        (0, R.CLOCK, "socclk"): mhz(1090),
        (0, R.POWER_LIMIT, ""): 560.0,
        (0, R.POWER, "average"): 89.0,
        (0, R.UTILIZATION, "general"): 0.0,
        (0, R.UTILIZATION, "memory"): 0.0,
        (0, R.PCIE_REPLAYS, ""): 147.0,
        (0, R.ENERGY, ""): 962825096.2974429,
        (0, R.ACTIVITY, "general"): 2469071528.0,
        (0, R.ACTIVITY, "memory"): 2189510857.0,
    })
    assert res.rows[0].gpu_uuid == "0x719d230578348e8c"
    assert res.rows[0].attr("model") == "AMD INSTINCT MI250 (MCM) OAM AC MBA"


@pytest.mark.parametrize(
    ("rel", "card0", "card1", "activity"),
    [
        # card0: "92.0" W, "50" %, "0" %, 68702699520 B, 51527024640 B;
        # card1: power "N/A (Secondary die)" omitted, use "50", used 51527024640;
        # activity: "GFX Activity" / "Memory Activity" of card0 then card1
        ("torchserve/sample_amd_metrics.json", (92.0, 0.5, 51527024640.0), (0.5, 51527024640.0),
         (62827955.0, 17044038.0, 46030661.0, 10645369.0)),
        ("torchserve/sample_amd_updated_metrics.json", (92.0, 0.25, 51527024640.0),
         (0.5, 51527024640.0), (62827955.0, 17044038.0, 46030661.0, 10645369.0)),
        ("torchserve/mi250_rocm_smi_metrics.json", (102.0, 0.5, 51527024640.0),
         (0.0, 11665408.0), (81364057.0, 12131476.0, 87427303.0, 13102149.0)),
    ],
)
def test_torchserve_mi250_secondary_die_power_is_omitted(
    rel: str, card0: tuple[float, float, float], card1: tuple[float, float],
    activity: tuple[float, float, float, float],
) -> None:
    """'N/A (Secondary die)' power on the second GCD is omitted, never exported as 0."""
    res = parse(rel)
    assert readings(res) == pytest.approx({
        (0, R.POWER, "average"): card0[0],
        (0, R.UTILIZATION, "general"): card0[1],
        (0, R.UTILIZATION, "memory"): 0.0,
        (0, R.MEMORY_LIMIT, ""): 68702699520.0,
        (0, R.MEMORY_USAGE, ""): card0[2],
        (1, R.UTILIZATION, "general"): card1[0],
        (1, R.UTILIZATION, "memory"): 0.0,
        (1, R.MEMORY_LIMIT, ""): 68702699520.0,
        (1, R.MEMORY_USAGE, ""): card1[1],
        (0, R.ACTIVITY, "general"): activity[0],
        (0, R.ACTIVITY, "memory"): activity[1],
        (1, R.ACTIVITY, "general"): activity[2],
        (1, R.ACTIVITY, "memory"): activity[3],
    })
    assert all(r.gpu_uuid is None for r in res.rows)  # no "Unique ID" key


@pytest.mark.parametrize(
    ("rel", "watts"),
    [("torchserve/sample_amd_discovery.json", 92.0),
     ("torchserve/mi250_rocm_smi_discovery.json", 101.0)],
)
def test_torchserve_discovery_only_primary_die_power(rel: str, watts: float) -> None:
    """Discovery JSON: one power reading (card0), the secondary die's N/A omitted."""
    import json

    doc = json.loads((SMI / rel).read_text())
    assert doc["card0"]["Average Graphics Package Power (W)"] == f"{watts:.1f}"
    assert readings(parse(rel)) == {(0, R.POWER, "average"): watts}


def test_rocm_smi_exporter_r9700_socket_power_current_clocks_throttle() -> None:
    """R9700: socket power, current_gfxclk/uclk, throttle_status raw + throttled{any}."""
    res = parse("rocm_smi_exporter/rocm_smi_all.json")
    assert readings(res) == pytest.approx({
        (0, R.TEMPERATURE, "edge"): 33.0,
        (0, R.TEMPERATURE, "junction"): 44.0,
        (0, R.TEMPERATURE, "memory"): 35.0,
        (0, R.POWER, "socket"): 276.0,
        (0, R.POWER_LIMIT, ""): 300.0,
        (0, R.UTILIZATION, "general"): 1.0,  # "100"
        (0, R.UTILIZATION, "memory"): 0.04,  # "4"
        (0, R.CLOCK, "sclk"): mhz(2844),
        (0, R.CLOCK, "mclk"): mhz(1258),
        (0, R.THROTTLE_STATUS, ""): 0.0,
        (0, R.THROTTLED, "any"): 0.0,
        (1, R.TEMPERATURE, "edge"): 35.0,
        (1, R.TEMPERATURE, "junction"): 49.0,
        (1, R.TEMPERATURE, "memory"): 36.0,
        (1, R.POWER, "socket"): 300.0,
        (1, R.POWER_LIMIT, ""): 300.0,
        (1, R.UTILIZATION, "general"): 1.0,
        (1, R.UTILIZATION, "memory"): 0.63,
        (1, R.CLOCK, "sclk"): mhz(2769),
        (1, R.CLOCK, "mclk"): mhz(1258),
        (1, R.THROTTLE_STATUS, ""): 16384.0,  # "throttle_status": "16384"
        (1, R.THROTTLED, "any"): 1.0,  # non-zero ASIC-specific mask
    })
    assert {r.attr("model") for r in res.rows} == {"AMD Radeon AI PRO R9700"}


def test_rocm_smi_exporter_na_device_name_gives_no_model() -> None:
    """'Device Name': 'N/A' -> no model attribute; VRAM bytes exported."""
    res = parse("rocm_smi_exporter/rocm_smi_na_name.json")
    got = readings(res)
    assert got[(0, R.MEMORY_USAGE, "")] == 1000000000.0
    assert got[(0, R.MEMORY_LIMIT, "")] == 34208743424.0
    assert got[(0, R.POWER, "socket")] == 100.0
    assert got[(0, R.UTILIZATION, "memory")] == pytest.approx(0.05)
    assert len(got) == 13  # 3 temps, power, limit, 2 util, 2 clocks, status, any, 2 VRAM
    assert all(r.attr("model") is None for r in res.rows)


def test_rocm_smi_exporter_vram_only() -> None:
    """VRAM-only document: exactly two readings per card, in bytes."""
    res = parse("rocm_smi_exporter/rocm_smi_vram.json")
    assert readings(res) == {
        (0, R.MEMORY_USAGE, ""): 21216985088.0,
        (0, R.MEMORY_LIMIT, ""): 34208743424.0,
        (1, R.MEMORY_USAGE, ""): 22884802560.0,
        (1, R.MEMORY_LIMIT, ""): 34208743424.0,
    }


def _navi22(used: float, avg_power: float | None, sclk: float, memkey: str) -> dict[Key, float]:
    d: dict[Key, float] = {
        (0, R.TEMPERATURE, "edge"): 45.0,
        (0, R.TEMPERATURE, "junction"): 47.0,
        (0, R.TEMPERATURE, "memory"): 46.0,
        (0, R.CLOCK, "dcefclk"): mhz(480),
        (0, R.CLOCK, "fclk"): mhz(1051),
        (0, R.CLOCK, "mclk"): mhz(96),
        (0, R.CLOCK, "sclk"): sclk,
        (0, R.CLOCK, "socclk"): mhz(685),
        (0, R.POWER_LIMIT, ""): 211.0,
        (0, R.UTILIZATION, "general"): 0.0,
        (0, R.UTILIZATION, memkey): 0.0,
        (0, R.PCIE_REPLAYS, ""): 0.0,
        (0, R.MEMORY_LIMIT, ""): 12868124672.0,
        (0, R.MEMORY_USAGE, ""): used,
    }
    if avg_power is not None:
        d[(0, R.POWER, "average")] = avg_power
    return d


@pytest.mark.parametrize(
    ("rel", "expected", "model"),
    [
        # ROCm 4.3: HBM temps "N/A" omitted; "Card series": "0x1002" is not a model
        ("telegraf/rx6700xt_rocm430.json", _navi22(1622728704.0, 6.0, mhz(500), "memory"), None),
        ("telegraf/rx6700xt_rocm571.json", _navi22(1564491776.0, 6.0, mhz(500), "memory"),
         "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"),
        # ROCm 6.0.2: "Average Graphics Package Power (W)": "N/A (Secondary die)"
        ("telegraf/rx6700xt_rocm602.json", _navi22(1572757504.0, None, mhz(500), "memory"),
         "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"),
        # ROCm 6.1.2: "sclk clock speed:": "(0Mhz)" is a real 0, kept
        ("telegraf/rx6700xt_rocm612.json", _navi22(1572745216.0, 6.0, 0.0, "memory"),
         "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"),
    ],
)
def test_telegraf_rx6700xt_across_rocm_versions(
    rel: str, expected: dict[Key, float], model: str | None
) -> None:
    """Same card on ROCm 4.3/5.7/6.0/6.1: key renames map to identical metrics."""
    res = parse(rel)
    assert not res.drops
    assert readings(res) == pytest.approx(expected)
    assert {r.attr("model") for r in res.rows} == {model}
    assert {r.gpu_uuid for r in res.rows} == {None}  # Unique ID and Serial are N/A


@pytest.mark.parametrize(
    ("rel", "cards", "temps", "avg_w", "used", "uuid"),
    [
        # card0: 31/34/30 C, "39.0" W, used 6782976 B; Unique ID N/A, Serial "0" -> no uuid
        ("telegraf/mi100_rocm571.json", 6, (31.0, 34.0, 30.0), 39.0, 6782976.0, None),
        ("telegraf/mi100_rocm602.json", 4, (53.0, 55.0, 53.0), 36.0, 6750208.0,
         "0x79ccd55167a2124a"),
    ],
)
def test_telegraf_mi100_multi_gpu(
    rel: str, cards: int, temps: tuple[float, float, float], avg_w: float, used: float,
    uuid: str | None,
) -> None:
    """MI100 nodes: 14 readings per card; card0's values converted to base units."""
    res = parse(rel)
    assert len(res.rows) == 14 * cards
    assert {r.gpu_index for r in res.rows} == set(range(cards))
    assert readings(res, 0) == pytest.approx({
        (0, R.TEMPERATURE, "edge"): temps[0],
        (0, R.TEMPERATURE, "junction"): temps[1],
        (0, R.TEMPERATURE, "memory"): temps[2],
        (0, R.CLOCK, "fclk"): mhz(1402),
        (0, R.CLOCK, "mclk"): mhz(1200),
        (0, R.CLOCK, "sclk"): mhz(300),
        (0, R.CLOCK, "socclk"): mhz(1000),
        (0, R.POWER_LIMIT, ""): 290.0,
        (0, R.POWER, "average"): avg_w,
        (0, R.UTILIZATION, "general"): 0.0,
        (0, R.UTILIZATION, "memory"): 0.0,
        (0, R.PCIE_REPLAYS, ""): 0.0,
        (0, R.MEMORY_LIMIT, ""): 34342961152.0,
        (0, R.MEMORY_USAGE, ""): used,
    })
    assert {r.gpu_uuid for r in res.rows if r.gpu_index == 0} == {uuid}
    assert {r.attr("model") for r in res.rows} == {"Arcturus GL-XL [Instinct MI100]"}


def test_telegraf_vega10_and_vega20() -> None:
    """Vega 10 (no fclk, no memory busy) and Vega 20 / MI50 (serial present, Unique ID wins)."""
    v10 = parse("telegraf/vega-10-XT.json")
    assert readings(v10) == pytest.approx({
        (0, R.TEMPERATURE, "edge"): 39.0,
        (0, R.TEMPERATURE, "junction"): 40.0,
        (0, R.TEMPERATURE, "memory"): 92.0,
        (0, R.CLOCK, "dcefclk"): mhz(600),
        (0, R.CLOCK, "mclk"): mhz(167),
        (0, R.CLOCK, "sclk"): mhz(1269),
        (0, R.CLOCK, "socclk"): mhz(960),
        (0, R.POWER_LIMIT, ""): 170.0,
        (0, R.POWER, "average"): 15.0,
        (0, R.UTILIZATION, "general"): 0.0,
        (0, R.PCIE_REPLAYS, ""): 0.0,
        (0, R.MEMORY_LIMIT, ""): 17163091968.0,
        (0, R.MEMORY_USAGE, ""): 17776640.0,
    })
    assert v10.rows[0].gpu_uuid == "0x2150e7d042a1124"
    v20 = parse("telegraf/vega-20-WKS-GL-XE.json")
    got = readings(v20)
    assert len(got) == 15
    assert got[(0, R.CLOCK, "sclk")] == mhz(1725)
    assert got[(0, R.CLOCK, "dcefclk")] == mhz(357)
    assert got[(0, R.POWER, "average")] == 26.0
    assert got[(0, R.MEMORY_USAGE, "")] == 10850304.0
    assert v20.rows[0].gpu_uuid == "0x2f048617326b1ea"
    assert v20.rows[0].attr("model") == "Radeon Instinct MI50 32GB"


def test_determined_ids_only_document_has_no_gauges() -> None:
    """An IDs-only rocm-smi document yields no readings and no drops."""
    res = parse("determined/mi100x4_rocm_smi_ids.json")
    assert res.rows == [] and not res.drops


def test_every_real_fixture_converts_to_conformant_table() -> None:
    """All real smi fixtures parse without drops and conform to GAUGE_SAMPLE."""
    files = sorted(p for p in SMI.glob("*/*.json") if "amd_smi" not in p.parts)
    assert len(files) == 19
    for p in files:
        res = parse(str(p.relative_to(SMI)))
        assert not res.drops, p
        batch = R.to_table(res.rows, ts_ns=1, source="rocm-smi")
        assert batch.num_rows == len(res.rows)
        units = set(batch.column("unit").to_pylist())
        assert units <= {"W", "Cel", "Hz", "By", "1", "J"}, p

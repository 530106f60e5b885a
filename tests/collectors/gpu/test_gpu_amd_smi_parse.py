"""amd-smi JSON parser: real MI210 ``static`` fixture, both ``metric`` shapes, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.gpu import rows as R
from collectors.gpu.amd_smi import load_gpu_list, parse_metric, parse_static
from tests.collectors.gpu.readings import readings

TD = Path(__file__).parents[3] / "collectors" / "gpu" / "testdata"


def test_static_mi210_fixture_identity_power_cap_and_vram() -> None:
    """Real amd-smi static --json (MI210): model, cap 300 W, VRAM 65520 MiB in bytes."""
    devices, res = parse_static((TD / "smi/amd_smi/mi210_amd_smi_static.json").read_text())
    assert set(devices) == {0}
    assert devices[0].attrs["model"] == "AMD Instinct MI210"  # asic.market_name
    assert devices[0].uuid is None  # board.product_serial is "0": not an id
    # limit.socket_power {"value": 300, "unit": "W"}; vram.size 65520 MB = 65520 * 2**20 B
    assert readings(res) == {
        (0, R.POWER_LIMIT, ""): 300.0,
        (0, R.MEMORY_LIMIT, ""): 68702699520.0,
    }


def test_metric_gpu_data_form_all_sections_in_base_units() -> None:
    """{"gpu_data": [...]}: every mapped section converted; N/A and gfx_1 omitted."""
    res = parse_metric((TD / "amd_smi_metric_gpu_data_synthetic.json").read_text())
    assert not res.drops  # the unknown section with unit "zz" is ignored, not an error
    # 87 % -> 0.87; mm_activity N/A -> mean of vcn [10, 30] % = 0.20; 542 W;
    # MHz * 1e6; hotspot -> junction; edge N/A omitted; 196592 MB * 2**20 = 206141652992;
    # 121344 MB * 2**20 = 127238406144; ECC deferred N/A omitted; energy 123456.5 J.
    assert readings(res) == pytest.approx({
        (0, R.UTILIZATION, "general"): 0.87,
        (0, R.UTILIZATION, "memory"): 0.41,
        (0, R.UTILIZATION, "media"): 0.20,
        (0, R.POWER, "socket"): 542.0,
        (0, R.CLOCK, "sclk"): 2.1e9,
        (0, R.CLOCK, "mclk"): 1.3e9,
        (0, R.CLOCK, "fclk"): 2.0e9,
        (0, R.CLOCK, "socclk"): 1.143e9,
        (0, R.TEMPERATURE, "junction"): 71.0,
        (0, R.TEMPERATURE, "memory"): 58.0,
        (0, R.PCIE_REPLAYS, ""): 2.0,
        (0, R.ECC_ERRORS, "correctable"): 4.0,
        (0, R.ECC_ERRORS, "uncorrectable"): 0.0,
        (0, R.ENERGY, ""): 123456.5,
        (0, R.MEMORY_LIMIT, ""): 206141652992.0,
        (0, R.MEMORY_USAGE, ""): 127238406144.0,
        # throttle: accumulation_counter 1000; ppt 250, socket_thermal 10, vr 0, prochot 0;
        # hbm_thermal N/A omitted
        (0, R.VIOLATION_SAMPLES, ""): 1000.0,
        (0, R.VIOLATION_TICKS, "ppt"): 250.0,
        (0, R.VIOLATION_TICKS, "socket_thermal"): 10.0,
        (0, R.VIOLATION_TICKS, "vr_thermal"): 0.0,
        (0, R.VIOLATION_TICKS, "prochot"): 0.0,
        # only ppt_violation_status is "ACTIVE" -> power
        (0, R.THROTTLED, "power"): 1.0,
        (0, R.THROTTLED, "current"): 0.0,
        (0, R.THROTTLED, "thermal"): 0.0,
        (0, R.THROTTLED, "prochot"): 0.0,
        (0, R.THROTTLED, "other"): 0.0,
        (0, R.THROTTLED, "any"): 1.0,
    })
    kinds = {(r.metric, r.kind) for r in res.rows}
    assert (R.VIOLATION_TICKS, R.COUNTER) in kinds and (R.ENERGY, R.COUNTER) in kinds


def test_metric_bare_list_behind_warning_banner() -> None:
    """Bare-list form after a WARNING line; bare numbers use default units; bad value dropped."""
    res = parse_metric((TD / "amd_smi_metric_list_synthetic.txt").read_text())
    # gfx_activity 73 (%) -> 0.73; average_socket_power 90 W; edge 45 C; hbm_0 50 C;
    # total_vram 65520 MB -> 68702699520 B; used 0 B; 2500000 uJ -> 2.5 J
    assert readings(res) == pytest.approx({
        (1, R.UTILIZATION, "general"): 0.73,
        (1, R.POWER, "average"): 90.0,
        (1, R.TEMPERATURE, "edge"): 45.0,
        (1, R.TEMPERATURE, "hbm_0"): 50.0,
        (1, R.MEMORY_LIMIT, ""): 68702699520.0,
        (1, R.MEMORY_USAGE, ""): 0.0,
        (1, R.ENERGY, ""): 2.5,
    })
    # "hotspot": "forty" -> bad_value naming the field; {"no_gpu_key": true} -> bad_shape
    assert res.drops == {"bad_value": 1, "bad_shape": 1}
    messages = " ".join(m for _, m in res.errors)
    assert "temperature.hotspot" in messages and "'forty'" in messages


def test_metric_static_identity_is_merged_by_gpu_index() -> None:
    """Devices from ``static`` give metric rows their model / uuid."""
    devices, _ = parse_static((TD / "smi/amd_smi/mi210_amd_smi_static.json").read_text())
    res = parse_metric('{"gpu_data": [{"gpu": 0, "usage": {"gfx_activity": 5}}]}', devices)
    assert [r.attr("model") for r in res.rows] == ["AMD Instinct MI210"]


def test_truncated_json_raises_parse_error_with_line_and_column() -> None:
    """Truncated amd-smi output -> ParseError(bad_json) naming line and column."""
    text = (TD / "amd_smi_metric_truncated_synthetic.json").read_text()
    with pytest.raises(R.ParseError) as ei:
        parse_metric(text, where="amd_smi_metric_truncated_synthetic.json")
    assert ei.value.reason == "bad_json"
    assert "amd_smi_metric_truncated_synthetic.json: line 1 column" in str(ei.value)


@pytest.mark.parametrize("text", ['{"gpu_data": 3}', '"just a string"', "42"])
def test_wrong_top_level_shape_is_bad_shape(text: str) -> None:
    """A JSON document that is neither a list nor {gpu_data: list} -> bad_shape."""
    with pytest.raises(R.ParseError) as ei:
        load_gpu_list(text)
    assert ei.value.reason == "bad_shape"


def test_unknown_unit_is_a_bad_value_not_a_crash() -> None:
    """A reading with an unknown unit is dropped naming the unit; others survive."""
    res = parse_metric(
        '[{"gpu": 0, "power": {"socket_power": {"value": 5, "unit": "horsepower"}},'
        ' "temperature": {"edge": 40}}]'
    )
    assert readings(res) == {(0, R.TEMPERATURE, "edge"): 40.0}
    assert res.drops == {"bad_value": 1}
    assert "horsepower" in res.errors[0][1]

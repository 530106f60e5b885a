"""sysfs amdgpu reader on the synthetic tree (testdata/sysfs_synthetic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.gpu import rows as R
from collectors.gpu.sysfs import amd_cards, read_sysfs
from tests.collectors.gpu.readings import readings

ROOT = Path(__file__).parents[3] / "collectors" / "gpu" / "testdata" / "sysfs_synthetic"


def test_only_amd_cards_are_listed_connectors_and_other_vendors_skipped() -> None:
    """card0 and card2 (vendor 0x1002) only: card0-DP-1 and card1 (0x10de) skipped."""
    assert [p.parent.name for p in amd_cards(ROOT)] == ["card0", "card2"]


def test_missing_root_gives_no_cards() -> None:
    """A root without class/drm yields no card and no rows."""
    assert amd_cards(ROOT / "nope") == []
    assert read_sysfs(ROOT / "nope").rows == []


def test_kernel_units_converted_to_base_units() -> None:
    """µW -> W, m°C -> °C, % -> ratio, Hz kept, pp_dpm '*' level, ras summed."""
    res = read_sysfs(ROOT)
    # card0: gpu_busy 37 -> 0.37, mem_busy 12 -> 0.12; power1_average 91000000 uW -> 91 W;
    # power1_cap 750000000 uW -> 750 W; temp 43000/44500/53000 m°C -> 43/44.5/53;
    # freq1 sclk 800000000 Hz (wins over pp_dpm_sclk), freq2 mclk 1600000000 Hz;
    # pp_dpm_fclk "0: 400Mhz *" -> 4e8; pp_dpm_socclk "0: 1090Mhz *" -> 1.09e9;
    # ras: ce 3 + 2 = 5, ue 0 + 1 = 1.
    # card2 (gpu_index 1): vram_total 17163091968; power1_input 15000000 uW -> 15 W socket;
    # temp1 45000 -> 45; pp_dpm_mclk "1: 1000Mhz *" -> 1e9; gpu_busy "garbage" dropped;
    # pp_dpm_sclk without '*' dropped.
    assert readings(res) == pytest.approx({
        (0, R.UTILIZATION, "general"): 0.37,
        (0, R.UTILIZATION, "memory"): 0.12,
        (0, R.MEMORY_USAGE, ""): 51527024640.0,
        (0, R.MEMORY_LIMIT, ""): 206141652992.0,
        (0, R.PCIE_REPLAYS, ""): 5.0,
        (0, R.ECC_ERRORS, "correctable"): 5.0,
        (0, R.ECC_ERRORS, "uncorrectable"): 1.0,
        (0, R.POWER, "average"): 91.0,
        (0, R.POWER_LIMIT, ""): 750.0,
        (0, R.TEMPERATURE, "edge"): 43.0,
        (0, R.TEMPERATURE, "junction"): 44.5,
        (0, R.TEMPERATURE, "memory"): 53.0,
        (0, R.CLOCK, "sclk"): 8e8,
        (0, R.CLOCK, "mclk"): 1.6e9,
        (0, R.CLOCK, "fclk"): 4e8,
        (0, R.CLOCK, "socclk"): 1.09e9,
        (1, R.MEMORY_LIMIT, ""): 17163091968.0,
        (1, R.POWER, "socket"): 15.0,
        (1, R.TEMPERATURE, "edge"): 45.0,
        (1, R.CLOCK, "mclk"): 1e9,
    })
    assert res.drops == {"bad_value": 2}
    files = sorted(Path(m.split(":")[0]).name for _, m in res.errors)
    assert files == ["gpu_busy_percent", "pp_dpm_sclk"]


def test_identity_and_partition_attributes() -> None:
    """unique_id -> gpu_uuid; product_name -> model; partitions as attributes."""
    res = read_sysfs(ROOT)
    card0 = next(r for r in res.rows if r.gpu_index == 0)
    assert card0.gpu_uuid == "0x00aa11bb22cc33dd"
    assert card0.attr("model") == "AMD Instinct MI300X"
    assert (card0.attr("compute_partition"), card0.attr("memory_partition")) == ("SPX", "NPS1")
    assert card0.attr("vendor") == "amd"
    card2 = next(r for r in res.rows if r.gpu_index == 1)
    assert card2.gpu_uuid is None and card2.attr("model") is None

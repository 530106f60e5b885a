"""GpuCollector: source detection, CLI failures, NVML error path, amdsmi test double."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from collectors.base import CollectorContext, available, create
from collectors.gpu import ROCM_SMI_ARGS, AmdSmiCliBackend, GpuCollector
from collectors.gpu import rows as R
from collectors.gpu.nvml import open_nvml
from collectors.gpu.runner import CliError, run_cli
from exporter import schema

TD = Path(__file__).parents[3] / "collectors" / "gpu" / "testdata"
HANG = str(TD / "smi_hang_synthetic.sh")
FAIL = str(TD / "smi_fail_synthetic.sh")
OK = str(TD / "smi_ok_synthetic.sh")
EMPTY = str(TD / "sysfs_synthetic" / "class")  # a root without class/drm


def ctx(logs: list[str], **opts: Any) -> CollectorContext:
    return CollectorContext(host="h", options=opts, log=logs.append)


def test_registered_as_gpu() -> None:
    """The plugin registers under the name "gpu"."""
    assert "gpu" in available()


def test_no_source_says_so_once_and_collect_returns_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing present: source "none", one log line naming every tried source, [] forever."""
    monkeypatch.setenv("PATH", "/nonexistent")
    logs: list[str] = []
    c = create("gpu", ctx(logs, sysfs_root=EMPTY, amdsmi_module="no_such_amdsmi",
                          nvml_module="no_such_pynvml"))
    assert c.source == "none"
    assert [c.collect() for _ in range(3)] == [[], [], []]
    assert len(logs) == 1
    for word in ("amdsmi", "amd-smi", "rocm-smi", "sysfs", "pynvml"):
        assert word in logs[0]


def test_amdsmi_import_keyerror_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """amdsmi raising KeyError on import (no ROCm) falls through to the next source."""
    import sys

    class Boom:
        def __getattr__(self, name: str) -> Any:
            raise KeyError("ROCM_PATH")

    monkeypatch.setitem(sys.modules, "amdsmi_keyerror_double", Boom())
    logs: list[str] = []
    c = GpuCollector(ctx(logs, source="auto", amdsmi_module="amdsmi_keyerror_double",
                         sysfs_root=str(TD / "sysfs_synthetic"), amd_smi="/nonexistent/x",
                         rocm_smi="/nonexistent/y"))
    assert c.source == "sysfs"
    assert logs == ["gpu: using source sysfs"]


def test_sysfs_source_emits_conformant_gauge_batch() -> None:
    """source=sysfs: one gauge_sample Emit, schema-conformant, source column "sysfs"."""
    logs: list[str] = []
    c = create("gpu", ctx(logs, source="sysfs", sysfs_root=str(TD / "sysfs_synthetic")))
    (emit,) = c.collect()
    assert emit.signal == "gauge_sample"
    batch = schema.conform("gauge_sample", emit.batch)
    assert set(batch.column("source").to_pylist()) == {"sysfs"}
    assert batch.num_rows == 20  # 16 rows for card0 + 4 for card2 (see test_gpu_sysfs_tree)
    assert c.drops == {"bad_value": 2}
    assert c.interval_s == 1.0


def test_run_cli_timeout_kills_a_hung_tool() -> None:
    """A CLI that hangs is killed at the timeout and reported as cli_timeout."""
    t0 = time.monotonic()
    with pytest.raises(CliError) as ei:
        run_cli([HANG], timeout_s=0.3)
    assert ei.value.reason == "cli_timeout"
    assert time.monotonic() - t0 < 5.0


def test_run_cli_nonzero_exit_names_status_and_stderr() -> None:
    """A CLI exiting 3 -> cli_exit with the status and its stderr line."""
    with pytest.raises(CliError) as ei:
        run_cli([FAIL], timeout_s=2.0)
    assert ei.value.reason == "cli_exit"
    assert "exit status 3" in str(ei.value) and "driver not loaded" in str(ei.value)


def test_hung_amd_smi_is_counted_and_collector_carries_on() -> None:
    """source=amd-smi with a hanging tool: each poll [] + cli_timeout drop, never raises."""
    logs: list[str] = []
    c = create("gpu", ctx(logs, source="amd-smi", amd_smi=HANG, timeout_s=0.2))
    assert c.source == "amd-smi"
    assert c.collect() == [] and c.collect() == []
    # poll 1: static and metric both time out -> 2 drops; poll 2: metric only -> 3 in total
    assert c.drops == {"cli_timeout": 3}
    assert any("cli_timeout" in m for m in logs)


def test_failing_rocm_smi_counts_cli_exit() -> None:
    """source=rocm-smi with a tool exiting non-zero -> cli_exit drop, []."""
    c = create("gpu", ctx([], source="rocm-smi", rocm_smi=FAIL))
    assert c.collect() == []
    assert c.drops == {"cli_exit": 1}


def test_rocm_smi_backend_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """rocm-smi via a real subprocess prints a real fixture: rows reach the batch."""
    monkeypatch.setenv("SMI_FIXTURE", str(TD / "smi/rocm_smi_exporter/rocm_smi_vram.json"))
    c = create("gpu", ctx([], source="rocm-smi", rocm_smi=OK))
    (emit,) = c.collect()
    got = sorted(zip(emit.batch.column("gpu_index").to_pylist(),
                     emit.batch.column("metric").to_pylist(),
                     emit.batch.column("value").to_pylist(), strict=True))
    assert got == [(0, R.MEMORY_LIMIT, 34208743424.0), (0, R.MEMORY_USAGE, 21216985088.0),
                   (1, R.MEMORY_LIMIT, 34208743424.0), (1, R.MEMORY_USAGE, 22884802560.0)]
    assert "--json" in ROCM_SMI_ARGS


def test_truncated_rocm_smi_output_is_bad_json_drop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Truncated JSON from the tool: bad_json drop, logged with line/column, no raise."""
    monkeypatch.setenv("SMI_FIXTURE", str(TD / "rocm_smi_truncated_synthetic.json"))
    logs: list[str] = []
    c = create("gpu", ctx(logs, source="rocm-smi", rocm_smi=OK))
    assert c.collect() == []
    assert c.drops == {"bad_json": 1}
    assert any("line 4 column" in m for m in logs)


def test_rocm_smi_bad_values_drop_fields_not_cards() -> None:
    """Non-numeric strings and a non-object card are dropped; good fields still export."""
    from collectors.gpu.rocm_smi import parse_rocm_smi

    res = parse_rocm_smi((TD / "rocm_smi_bad_values_synthetic.json").read_text())
    # "busy" and "(unknown)" -> bad_value; card1 is a list -> bad_shape; unknown key ignored;
    # N/A power omitted; edge "41.0" kept; Unique ID N/A and Serial "0" -> no uuid
    assert [(r.metric, r.value, r.gpu_uuid) for r in res.rows] == [
        (R.TEMPERATURE, 41.0, None)]
    assert res.drops == {"bad_value": 2, "bad_shape": 1}


def test_amd_smi_static_once_then_metric_each_poll() -> None:
    """amd-smi backend: static fetched once (identity, cap), metric every poll."""
    calls: list[list[str]] = []
    static = (TD / "smi/amd_smi/mi210_amd_smi_static.json").read_text()

    def fake_run(argv: list[str], timeout_s: float) -> str:
        calls.append(argv[1:])
        if argv[1] == "static":
            return static
        return '{"gpu_data": [{"gpu": 0, "usage": {"gfx_activity": {"value": 50, "unit": "%"}}}]}'

    c = GpuCollector(ctx([]), backend=AmdSmiCliBackend("amd-smi", 2.0, run=fake_run))
    assert c.source == "amd-smi"
    for _ in range(2):
        (emit,) = c.collect()
        rows = emit.batch.to_pylist()
        assert {(r["metric"], r["value"]) for r in rows} == {
            (R.UTILIZATION, 0.5), (R.POWER_LIMIT, 300.0), (R.MEMORY_LIMIT, 68702699520.0)}
        assert all(dict(r["attributes"])["model"] == "AMD Instinct MI210" for r in rows)
    assert calls == [["static", "--json"], ["metric", "--json"], ["metric", "--json"]]


def test_collector_emits_violation_ratio_from_second_poll() -> None:
    """Violation accumulators across polls -> hw.gpu.throttle.ratio on the 2nd poll."""
    docs = iter([
        '[{"gpu": 0, "throttle": {"accumulation_counter": 100, "ppt_accumulated": 0}}]',
        '[{"gpu": 0, "throttle": {"accumulation_counter": 300, "ppt_accumulated": 150}}]',
    ])
    backend = AmdSmiCliBackend("amd-smi", 2.0, run=lambda a, t: "[]" if a[1] == "static"
                               else next(docs))
    c = GpuCollector(ctx([]), backend=backend)
    first = c.collect()[0].batch.to_pylist()
    assert R.VIOLATION_RATIO not in {r["metric"] for r in first}
    second = c.collect()[0].batch.to_pylist()
    ratios = [(dict(r["attributes"])["reason"], r["value"]) for r in second
              if r["metric"] == R.VIOLATION_RATIO]
    assert ratios == [("ppt", 0.75)]  # (150 - 0) / (300 - 100)


def test_backend_exception_is_counted_not_raised() -> None:
    """A backend that raises an unexpected error -> read_error drop, collect() returns []."""

    class Broken:
        source = "amdsmi"

        def read(self) -> R.ParseResult:
            raise OSError("device vanished")

    c = GpuCollector(ctx([]), backend=Broken())
    assert c.collect() == []
    assert c.drops == {"read_error": 1}


def test_nvml_error_path_without_library() -> None:
    """pynvml installed but no libnvidia-ml: open_nvml raises RuntimeError naming NVML."""
    pytest.importorskip("pynvml")
    if any(Path(p, "libnvidia-ml.so.1").exists() for p in ("/usr/lib/x86_64-linux-gnu",
                                                           "/usr/lib64", "/usr/lib")):
        pytest.skip("an NVML library is present on this machine")
    with pytest.raises(RuntimeError) as ei:
        open_nvml()
    assert "pynvml" in str(ei.value) and "NVML" in str(ei.value)
    c = create("gpu", ctx([], source="nvml"))
    assert c.source == "none" and c.collect() == []


def test_nvml_double_rows_use_same_names_with_vendor_nvidia() -> None:
    """NVML source (test double module): same metric names, vendor="nvidia", base units."""
    from collectors.gpu.nvml import read_nvml

    class Nvml:
        NVML_TEMPERATURE_GPU = 0
        NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

        def nvmlDeviceGetName(self, h: Any) -> str:
            return "NVIDIA H100 80GB HBM3"

        def nvmlDeviceGetUUID(self, h: Any) -> str:
            return "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"

        def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
            return SimpleNamespace(gpu=40, memory=10)

        def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
            return 123456  # mW

        def nvmlDeviceGetClockInfo(self, h: Any, which: int) -> int:
            return {1: 1980, 2: 2619}[which]  # MHz

        def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
            return SimpleNamespace(used=1024, total=85899345920)

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Any) -> int:
            return 0x4  # SwPowerCap

        def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
            raise RuntimeError("NVMLError_NotSupported")

    res = read_nvml(Nvml(), ["h0"])
    got = {(r.metric, r.attr("hw.gpu.task") or r.attr("clock") or r.attr("reason") or ""):
           r.value for r in res.rows}
    # 40 % -> 0.4; 123456 mW -> 123.456 W; 1980 MHz -> 1.98e9 Hz; temperature unsupported
    assert got == pytest.approx({
        (R.UTILIZATION, "general"): 0.4, (R.UTILIZATION, "memory"): 0.1,
        (R.POWER, ""): 123.456, (R.CLOCK, "sclk"): 1.98e9, (R.CLOCK, "mclk"): 2.619e9,
        (R.MEMORY_USAGE, ""): 1024.0, (R.MEMORY_LIMIT, ""): 85899345920.0,
        (R.THROTTLED, "power"): 1.0, (R.THROTTLED, "current"): 0.0,
        (R.THROTTLED, "thermal"): 0.0, (R.THROTTLED, "prochot"): 0.0,
        (R.THROTTLED, "other"): 0.0, (R.THROTTLED, "any"): 1.0,
    })
    assert {r.attr("vendor") for r in res.rows} == {"nvidia"}
    assert {r.gpu_uuid for r in res.rows} == {"GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"}


def test_amdsmi_library_double_maps_through_amd_smi_shape() -> None:
    """amdsmi source (test double module): library dicts -> same metrics, base units."""
    from collectors.gpu.amdsmi_lib import read_library

    class Lib:
        AmdSmiTemperatureType = SimpleNamespace(EDGE=0, HOTSPOT=1, VRAM=2)
        AmdSmiTemperatureMetric = SimpleNamespace(CURRENT=0)
        AmdSmiClkType = SimpleNamespace(GFX=0, MEM=1)
        AmdSmiMemoryType = SimpleNamespace(VRAM=0)

        def amdsmi_get_gpu_device_uuid(self, h: Any) -> str:
            return "a1ff74a1-0000-1000-80d1-b4a8c7f3e7c2"

        def amdsmi_get_gpu_asic_info(self, h: Any) -> dict[str, Any]:
            return {"market_name": "AMD Instinct MI300X"}

        def amdsmi_get_gpu_compute_partition(self, h: Any) -> str:
            return "CPX"

        def amdsmi_get_gpu_activity(self, h: Any) -> dict[str, Any]:
            return {"gfx_activity": 90, "umc_activity": 30, "mm_activity": "N/A"}

        def amdsmi_get_power_info(self, h: Any) -> dict[str, Any]:
            return {"current_socket_power": 650, "average_socket_power": "N/A"}

        def amdsmi_get_power_cap_info(self, h: Any) -> dict[str, Any]:
            return {"power_cap": 750000000}  # uW

        def amdsmi_get_energy_count(self, h: Any) -> dict[str, Any]:
            return {"energy_accumulator": 1000000, "counter_resolution": 15.3}  # uJ/tick

        def amdsmi_get_temp_metric(self, h: Any, t: int, m: int) -> int:
            return {0: 40, 1: 75, 2: 60}[t]

        def amdsmi_get_clock_info(self, h: Any, c: int) -> dict[str, Any]:
            return {"clk": {0: 2100, 1: 1300}[c]}

        def amdsmi_get_gpu_memory_usage(self, h: Any, m: int) -> int:
            return 2**30

        def amdsmi_get_gpu_memory_total(self, h: Any, m: int) -> int:
            return 192 * 2**30

        def amdsmi_get_violation_status(self, h: Any) -> dict[str, Any]:
            return {"acc_counter": 10, "acc_ppt_pwr": 3, "active_ppt_pwr": True,
                    "acc_hbm_thrm": "N/A"}

        def amdsmi_get_gpu_metrics_info(self, h: Any) -> dict[str, Any]:
            return {"indep_throttle_status": 1 << 36}  # TEMP_HOTSPOT

    res = read_library(Lib(), ["h0"])
    assert not res.drops
    got = {(r.metric, r.attr("hw.gpu.task") or r.attr("sensor") or r.attr("clock")
            or r.attr("reason") or ""): r.value for r in res.rows}
    # 90 % -> 0.9; 650 W; cap 750000000 uW -> 750 W; energy 1e6 ticks * 15.3 uJ = 15.3 J;
    # 2100 MHz -> 2.1e9; 192 GiB = 206158430208 B; ppt active + hotspot bit -> power, thermal
    assert got == pytest.approx({
        (R.UTILIZATION, "general"): 0.9, (R.UTILIZATION, "memory"): 0.3,
        (R.POWER, "socket"): 650.0, (R.POWER_LIMIT, ""): 750.0, (R.ENERGY, ""): 15.3,
        (R.TEMPERATURE, "edge"): 40.0, (R.TEMPERATURE, "junction"): 75.0,
        (R.TEMPERATURE, "memory"): 60.0,
        (R.CLOCK, "sclk"): 2.1e9, (R.CLOCK, "mclk"): 1.3e9,
        (R.MEMORY_USAGE, ""): 1073741824.0, (R.MEMORY_LIMIT, ""): 206158430208.0,
        (R.VIOLATION_SAMPLES, ""): 10.0, (R.VIOLATION_TICKS, "ppt"): 3.0,
        (R.THROTTLE_STATUS, ""): float(1 << 36),
        (R.THROTTLED, "power"): 1.0, (R.THROTTLED, "thermal"): 1.0,
        (R.THROTTLED, "current"): 0.0, (R.THROTTLED, "prochot"): 0.0,
        (R.THROTTLED, "other"): 0.0, (R.THROTTLED, "any"): 1.0,
    })
    row = res.rows[0]
    assert row.gpu_uuid == "a1ff74a1-0000-1000-80d1-b4a8c7f3e7c2"
    assert (row.attr("model"), row.attr("compute_partition")) == ("AMD Instinct MI300X", "CPX")


def test_rocm_smi_without_showmetrics_is_asked_again_without_it_and_says_so() -> None:
    """An older rocm-smi rejects --showmetrics (argparse exit 2, "unrecognized
    arguments"): the backend repeats the call without the flag, keeps it off for
    later polls, and the collector logs once that throttle readings are lost."""
    from collectors.gpu import RocmSmiCliBackend
    from collectors.gpu.runner import CliError

    calls: list[list[str]] = []

    def old_rocm_smi(argv: list[str], timeout_s: float) -> str:
        calls.append(argv)
        if "--showmetrics" in argv:
            raise CliError("cli_exit", "rocm-smi: exit status 2: rocm-smi: error: "
                                       "unrecognized arguments: --showmetrics")  # fmt: skip
        return '{"card0": {"GPU use (%)": "12"}}'

    b = RocmSmiCliBackend("rocm-smi", 1.0, run=old_rocm_smi)
    assert [r.value for r in b.read().rows] == [0.12]
    assert b.note is not None and "throttle" in b.note
    b.read()
    assert ["--showmetrics" in c for c in calls] == [True, False, False]


def test_rocm_smi_other_failures_are_not_retried() -> None:
    """A non-zero exit for any other reason propagates (counted as a drop by the collector)."""
    from collectors.gpu import RocmSmiCliBackend
    from collectors.gpu.runner import CliError

    def broken(argv: list[str], timeout_s: float) -> str:
        raise CliError("cli_exit", "rocm-smi: exit status 1: no AMD GPU found")

    b = RocmSmiCliBackend("rocm-smi", 1.0, run=broken)
    with pytest.raises(CliError):
        b.read()
    assert "--showmetrics" in b.args

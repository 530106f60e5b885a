"""Optional NVIDIA source through ``pynvml`` (package ``nvidia-ml-py``).

Same metric names as the AMD sources with attribute ``vendor="nvidia"``.

==========================================  ===========================  ======
NVML call                                   metric / attributes          unit
==========================================  ===========================  ======
nvmlDeviceGetUtilizationRates .gpu/.memory  utilization general/memory   %
nvmlDeviceGetDecoderUtilization [0]         utilization task=media       %
nvmlDeviceGetPowerUsage                     power sensor=average         mW
nvmlDeviceGetEnforcedPowerLimit             power.limit                  mW
nvmlDeviceGetTotalEnergyConsumption         energy (counter)             mJ
nvmlDeviceGetTemperature(GPU)               temperature sensor=edge      C
nvmlDeviceGetClockInfo(SM / MEM)            clock sclk / mclk            MHz
nvmlDeviceGetMemoryInfo .used/.total        memory.usage / .limit        B
nvmlDeviceGetPcieReplayCounter              pcie.replays (counter)       count
nvmlDeviceGetCurrentClocksThrottleReasons   throttled reason=...         mask
==========================================  ===========================  ======

Throttle bits (``nvml.h`` ``nvmlClocksThrottleReason*``): 0x4 SwPowerCap and
0x80 HwPowerBrakeSlowdown -> ``power``; 0x20 SwThermal and 0x40 HwThermal ->
``thermal``; 0x8 HwSlowdown, 0x10 SyncBoost, 0x2 ApplicationsClocksSetting,
0x100 DisplayClockSetting -> ``other``; 0x1 GpuIdle is not throttling.
"""

from __future__ import annotations

import importlib
from typing import Any

from collectors.gpu import rows as R
from collectors.gpu import throttle

_call = R.call_or_none  # one "reading or None" for every vendor library

_NV_BITS = {
    0x4: "power",
    0x80: "power",
    0x20: "thermal",
    0x40: "thermal",
    0x8: "other",
    0x10: "other",
    0x2: "other",
    0x100: "other",
}


def decode_nvml_throttle(mask: int) -> dict[str, bool]:
    """NVML clocks-throttle-reasons mask -> ``{reason: active}``.

    >>> sorted(k for k, v in decode_nvml_throttle(0x4 | 0x1).items() if v)
    ['power']
    """
    out = dict.fromkeys(throttle.REASONS, False)
    for bit, reason in _NV_BITS.items():
        if mask & bit:
            out[reason] = True
    return out


def open_nvml(module: str = "pynvml") -> tuple[Any, list[Any]]:
    """Import and initialise NVML; returns ``(module, handles)``.

    Raises ``RuntimeError`` naming the cause (module missing, NVML shared
    library not found, driver not loaded, no GPU).
    """
    try:
        mod: Any = importlib.import_module(module)
        mod.nvmlInit()
        handles = [mod.nvmlDeviceGetHandleByIndex(i) for i in range(mod.nvmlDeviceGetCount())]
    except Exception as e:
        raise RuntimeError(f"{module}: {type(e).__name__}: {e}") from e
    if not handles:
        raise RuntimeError(f"{module}: no GPU handles")
    return mod, handles


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return v if isinstance(v, str) else None


def read_nvml(mod: Any, handles: list[Any]) -> R.ParseResult:
    """Rows of every NVML device (index = NVML index)."""
    res = R.ParseResult()
    for i, h in enumerate(handles):
        attrs = {"vendor": "nvidia"}
        name = _text(_call(mod, "nvmlDeviceGetName", h))
        if name:
            attrs["model"] = name
        dev = R.Device(i, _text(_call(mod, "nvmlDeviceGetUUID", h)), attrs)

        def add(
            metric: str,
            v: Any,
            factor: float,
            unit: str,
            kind: str = R.GAUGE,
            dev: R.Device = dev,
            **a: str,
        ) -> None:
            if isinstance(v, int | float) and not isinstance(v, bool):
                res.rows.append(dev.row(metric, float(v) * factor, unit, kind, **a))

        util = _call(mod, "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            add(R.UTILIZATION, getattr(util, "gpu", None), 0.01, "1", hw__gpu__task="general")
            add(R.UTILIZATION, getattr(util, "memory", None), 0.01, "1", hw__gpu__task="memory")
        dec = _call(mod, "nvmlDeviceGetDecoderUtilization", h)
        if isinstance(dec, list | tuple) and dec:
            add(R.UTILIZATION, dec[0], 0.01, "1", hw__gpu__task="media")
        add(R.POWER, _call(mod, "nvmlDeviceGetPowerUsage", h), 1e-3, "W", sensor="average")
        add(R.POWER_LIMIT, _call(mod, "nvmlDeviceGetEnforcedPowerLimit", h), 1e-3, "W")
        add(R.ENERGY, _call(mod, "nvmlDeviceGetTotalEnergyConsumption", h), 1e-3, "J", R.COUNTER)
        add(
            R.TEMPERATURE,
            _call(mod, "nvmlDeviceGetTemperature", h, mod.NVML_TEMPERATURE_GPU),
            1.0,
            "Cel",
            sensor="edge",
        )
        add(
            R.CLOCK,
            _call(mod, "nvmlDeviceGetClockInfo", h, mod.NVML_CLOCK_SM),
            1e6,
            "Hz",
            clock="sclk",
        )
        add(
            R.CLOCK,
            _call(mod, "nvmlDeviceGetClockInfo", h, mod.NVML_CLOCK_MEM),
            1e6,
            "Hz",
            clock="mclk",
        )
        mem = _call(mod, "nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            add(R.MEMORY_USAGE, getattr(mem, "used", None), 1.0, "By")
            add(R.MEMORY_LIMIT, getattr(mem, "total", None), 1.0, "By")
        add(R.PCIE_REPLAYS, _call(mod, "nvmlDeviceGetPcieReplayCounter", h), 1.0, "1", R.COUNTER)
        mask = _call(mod, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        if isinstance(mask, int):
            res.rows.extend(throttle.throttled_rows(dev, decode_nvml_throttle(mask)))
    return res

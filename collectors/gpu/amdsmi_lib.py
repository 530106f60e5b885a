"""Read gauges through the ``amdsmi`` Python library (ROCm 6.x+).

Each GPU's readings are gathered into the same JSON shape that
``amd-smi metric --json`` prints and handed to
:func:`collectors.gpu.amd_smi.parse_gpu`, so both sources share one mapping.
The library raises for readings an ASIC does not support; such a reading is
simply omitted (that is normal, not a drop).

=========================================  ===============================
library call                               amd-smi JSON path (unit)
=========================================  ===============================
amdsmi_get_gpu_activity                    usage.{gfx,umc,mm}_activity (%)
amdsmi_get_power_info                      power.{current,average}_socket_
                                           power (W)
amdsmi_get_power_cap_info ``power_cap``    power.power_limit (uW)
amdsmi_get_energy_count                    energy.total_energy_consumption
                                           (ticks x counter_resolution uJ)
amdsmi_get_temp_metric EDGE/HOTSPOT/VRAM   temperature.edge/hotspot/mem (C)
amdsmi_get_clock_info GFX/MEM/...          clock.<x>_0.clk (MHz)
amdsmi_get_gpu_memory_usage/_total VRAM    mem_usage.used/total_vram (B)
amdsmi_get_gpu_pci_replay_counter          pcie.replay_count
amdsmi_get_gpu_total_ecc_count             ecc.total_*_count
amdsmi_get_violation_status                throttle.* (acc_* ticks,
                                           active_* flags)
amdsmi_get_gpu_metrics_info                indep_throttle_status,
                                           throttle_status
=========================================  ===============================

Note: without ROCm, ``import amdsmi`` raises ``KeyError`` (it reads
``ROCM_PATH``), not ``ImportError``: :func:`open_library` catches everything.
"""

from __future__ import annotations

import importlib
from typing import Any

from collectors.gpu import amd_smi
from collectors.gpu import rows as R

_call = R.call_or_none  # one "reading or None" for every vendor library

_VIOL = {
    "ppt": ("acc_ppt_pwr", "active_ppt_pwr"),
    "socket_thermal": ("acc_socket_thrm", "active_socket_thrm"),
    "vr_thermal": ("acc_vr_thrm", "active_vr_thrm"),
    "hbm_thermal": ("acc_hbm_thrm", "active_hbm_thrm"),
    "prochot": ("acc_prochot_thrm", "active_prochot_thrm"),
}


def open_library(module: str = "amdsmi") -> tuple[Any, list[Any]]:
    """Import and initialise ``module``; returns ``(module, handles)``.

    Raises ``RuntimeError`` with the underlying cause on any failure
    (missing module, ``KeyError`` from a missing ROCm, init failure, no GPU).
    """
    try:
        mod: Any = importlib.import_module(module)
        mod.amdsmi_init()
        handles = list(mod.amdsmi_get_processor_handles())
    except Exception as e:  # amdsmi raises KeyError without ROCm
        raise RuntimeError(f"{module}: {type(e).__name__}: {e}") from e
    if not handles:
        raise RuntimeError(f"{module}: no GPU handles")
    return mod, handles


def gpu_dict(mod: Any, handle: Any, index: int) -> dict[str, Any]:
    """One GPU's readings in ``amd-smi metric --json`` shape (see table above)."""
    g: dict[str, Any] = {"gpu": index}
    uuid = _call(mod, "amdsmi_get_gpu_device_uuid", handle)
    if isinstance(uuid, str):
        g["uuid"] = uuid
    asic = _call(mod, "amdsmi_get_gpu_asic_info", handle)
    if isinstance(asic, dict):
        g["asic"] = asic
    part = {
        "compute_partition": _call(mod, "amdsmi_get_gpu_compute_partition", handle),
        "memory_partition": _call(mod, "amdsmi_get_gpu_memory_partition", handle),
    }
    g["partition"] = {k: v for k, v in part.items() if isinstance(v, str)}
    act = _call(mod, "amdsmi_get_gpu_activity", handle)
    if isinstance(act, dict):
        g["usage"] = {k: act.get(k) for k in ("gfx_activity", "umc_activity", "mm_activity")}
    power: dict[str, Any] = {}
    pinfo = _call(mod, "amdsmi_get_power_info", handle)
    if isinstance(pinfo, dict):
        for k in ("current_socket_power", "average_socket_power"):
            if k in pinfo:
                power[k] = {"value": pinfo[k], "unit": "W"}
    cap = _call(mod, "amdsmi_get_power_cap_info", handle)
    if isinstance(cap, dict) and "power_cap" in cap:
        power["power_limit"] = {"value": cap["power_cap"], "unit": "uW"}
    g["power"] = power
    energy = _call(mod, "amdsmi_get_energy_count", handle)
    if isinstance(energy, dict):
        ticks = energy.get("energy_accumulator", energy.get("power"))
        res = energy.get("counter_resolution")
        if isinstance(ticks, int | float) and isinstance(res, int | float):
            g["energy"] = {"total_energy_consumption": {"value": ticks * res, "unit": "uJ"}}
    temps: dict[str, Any] = {}
    ttype, tmetric = (
        getattr(mod, "AmdSmiTemperatureType", None),
        getattr(mod, "AmdSmiTemperatureMetric", None),
    )
    if ttype is not None and tmetric is not None:
        for key, name in (("edge", "EDGE"), ("hotspot", "HOTSPOT"), ("mem", "VRAM")):
            t = getattr(ttype, name, None)
            if t is not None:
                temps[key] = _call(mod, "amdsmi_get_temp_metric", handle, t, tmetric.CURRENT)
    g["temperature"] = temps
    clocks: dict[str, Any] = {}
    ctype = getattr(mod, "AmdSmiClkType", None)
    if ctype is not None:
        for key, name in (
            ("gfx_0", "GFX"),
            ("mem_0", "MEM"),
            ("fclk_0", "DF"),
            ("socclk_0", "SOC"),
            ("vclk_0", "VCLK0"),
            ("dclk_0", "DCLK0"),
        ):
            c = getattr(ctype, name, None)
            info = _call(mod, "amdsmi_get_clock_info", handle, c) if c is not None else None
            if isinstance(info, dict) and "clk" in info:
                clocks[key] = {"clk": {"value": info["clk"], "unit": "MHz"}}
    g["clock"] = clocks
    mtype = getattr(mod, "AmdSmiMemoryType", None)
    if mtype is not None:
        g["mem_usage"] = {
            "used_vram": {
                "value": _call(mod, "amdsmi_get_gpu_memory_usage", handle, mtype.VRAM),
                "unit": "B",
            },
            "total_vram": {
                "value": _call(mod, "amdsmi_get_gpu_memory_total", handle, mtype.VRAM),
                "unit": "B",
            },
        }
    g["pcie"] = {"replay_count": _call(mod, "amdsmi_get_gpu_pci_replay_counter", handle)}
    ecc = _call(mod, "amdsmi_get_gpu_total_ecc_count", handle)
    if isinstance(ecc, dict):
        g["ecc"] = {
            f"total_{k}": ecc.get(k)
            for k in ("correctable_count", "uncorrectable_count", "deferred_count")
            if k in ecc
        }
    viol = _call(mod, "amdsmi_get_violation_status", handle)
    if isinstance(viol, dict):
        thr: dict[str, Any] = {"accumulation_counter": viol.get("acc_counter")}
        for v, (acc, active) in _VIOL.items():
            thr[f"{v}_accumulated"] = viol.get(acc)
            flag = viol.get(active)
            if isinstance(flag, bool):
                thr[f"{v}_violation_status"] = "ACTIVE" if flag else "NOT ACTIVE"
        g["throttle"] = thr
    metrics = _call(mod, "amdsmi_get_gpu_metrics_info", handle)
    if isinstance(metrics, dict):
        g["metrics"] = {
            k: metrics[k] for k in ("indep_throttle_status", "throttle_status") if k in metrics
        }
    return g


def read_library(mod: Any, handles: list[Any]) -> R.ParseResult:
    """Rows of every GPU handle (index = position in ``handles``)."""
    res = R.ParseResult()
    for i, h in enumerate(handles):
        g = gpu_dict(mod, h, i)
        res.extend(amd_smi.parse_gpu(g, amd_smi.device_of(g), "amdsmi"))
    return res

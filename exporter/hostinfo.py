"""Host details for ``env.json``: kernel, CPU, ROCm, GPU driver and GPUs.

Read from files only (no subprocess), each ``None`` when this host does not
expose it:

=============  ==============================================================
key            source
=============  ==============================================================
``kernel``     ``platform.release()``/``version()``, and the ``/proc/cmdline``
               parameters that shape latency (:data:`CMDLINE_KEYS`: ``isolcpus``,
               ``nohz_full``, ``mitigations``, ...; nothing else of it)
``cpu``        ``/proc/cpuinfo`` model name, logical CPUs, sockets (physical
               ids), cores per socket, flags of interest; this process's CPU
               affinity; NUMA nodes (``/sys/devices/system/node``)
``rocm``       ``$ROCM_PATH`` or ``/opt/rocm``: ``.info/version``
``driver``     ``/sys/module/amdgpu/version`` (DKMS amdgpu), else ``in-kernel``
               when ``/sys/module/amdgpu`` exists; NVIDIA
               ``/proc/driver/nvidia/version`` first line
``gpus``       ``/sys/class/drm/card*/device``: PCI vendor/device ids, PCI
               address, ``product_name`` when the driver has it; KFD nodes'
               ``gfx_target_version`` (``/sys/class/kfd/kfd/topology/nodes``)
=============  ==============================================================
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

CMDLINE_KEYS = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity", "mitigations",
                "intel_pstate", "amd_pstate", "processor.max_cstate", "intel_idle.max_cstate",
                "idle", "iommu", "amd_iommu", "transparent_hugepage", "preempt")
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "fma", "hypervisor")


def _read(p: Path) -> str | None:
    try:
        return p.read_text(errors="replace").strip()
    except OSError:
        return None


def cpu_details(cpuinfo: Path = Path("/proc/cpuinfo"),
                node_root: Path = Path("/sys/devices/system/node")) -> dict[str, Any]:
    """CPU model, counts and flags of interest from ``cpuinfo``."""
    text = _read(cpuinfo) or ""
    model: str | None = None
    cores: int | None = None
    phys: set[str] = set()
    flags: set[str] = set()
    logical = 0
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key, val = key.strip(), val.strip()
        if key == "processor":
            logical += 1
        elif key == "model name" and model is None:
            model = val
        elif key == "physical id":
            phys.add(val)
        elif key == "cpu cores" and cores is None:
            cores = int(val) if val.isdigit() else None
        elif key == "flags" and not flags:
            flags = set(val.split())
    return {
        "model": model, "logical_cpus": logical or os.cpu_count(),
        "sockets": len(phys) or None, "cores_per_socket": cores,
        "flags": sorted(f for f in FLAGS if f in flags),
        "affinity": sorted(os.sched_getaffinity(0)),
        "numa_nodes": len(list(node_root.glob("node[0-9]*"))) or None,
    }


def gpu_details(drm: Path = Path("/sys/class/drm"),
                kfd: Path = Path("/sys/class/kfd/kfd/topology/nodes")) -> list[dict[str, Any]]:
    """One dict per DRM card with PCI ids (and KFD gfx targets, listed once)."""
    out: list[dict[str, Any]] = []
    for card in sorted(drm.glob("card[0-9]*")):
        if "-" in card.name:  # connectors (card0-DP-1)
            continue
        dev = card / "device"
        out.append({"card": card.name, "vendor": _read(dev / "vendor"),
                    "device": _read(dev / "device"),
                    "pci": os.path.basename(os.path.realpath(dev)) if dev.exists() else None,
                    "product_name": _read(dev / "product_name")})
    targets = []
    for node in sorted(kfd.glob("[0-9]*")):
        for line in (_read(node / "properties") or "").splitlines():
            k, _, v = line.partition(" ")
            if k == "gfx_target_version" and v.strip() not in ("", "0"):
                targets.append(int(v))
    if targets and out:
        out[0]["kfd_gfx_target_versions"] = targets
    return out


def host_details() -> dict[str, Any]:
    """The ``env.json`` host section (module doc)."""
    rocm_root = Path(os.environ.get("ROCM_PATH") or "/opt/rocm")
    amdgpu = Path("/sys/module/amdgpu")
    nv = _read(Path("/proc/driver/nvidia/version"))
    driver = ({"amdgpu": _read(amdgpu / "version") or "in-kernel"} if amdgpu.exists()
              else {"nvidia": nv.splitlines()[0]} if nv else None)
    return {
        "kernel_details": {"release": platform.release(), "version": platform.version(),
                           "cmdline": {k: v for k, _, v in (
                               t.partition("=") for t in (_read(Path("/proc/cmdline")) or "")
                               .split(" --", 1)[0].split())
                               if k in CMDLINE_KEYS or k.startswith("amdgpu.")}},
        "cpu": cpu_details(),
        "rocm": {"path": str(rocm_root), "version": _read(rocm_root / ".info/version")}
        if rocm_root.exists() else None,
        "driver": driver,
        "gpus": gpu_details(),
    }

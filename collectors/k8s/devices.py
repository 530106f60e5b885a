"""Device-plugin device id -> the GPU as the ``gpu`` collector names it.

What the device plugins put in ``device_ids`` (pod-resources API):

* AMD ``k8s-device-plugin`` (``amd.com/gpu``): the PCI address of each GPU,
  the name of its directory under
  ``/sys/module/amdgpu/drivers/pci:amdgpu/`` (``0000:83:00.0``;
  ``internal/pkg/amdgpu/amdgpu.go`` ``GetAMDGPUs``, ``devices[filepath.Base(path)]``);
  on MI300 with compute partitions, also ``amdgpu_xcp_<n>`` platform devices.
* NVIDIA device plugin (``nvidia.com/gpu``): the GPU UUID (``GPU-…``) or a
  MIG device UUID (``MIG-…``).
* Other plugins and test setups: a bare GPU index (``0``, ``1``…).

:func:`gpu_key` maps them to ``("uuid", uuid)`` or ``("index", n)``, the
identity the ``gpu`` collector puts on every ``hw.gpu.*`` row. A PCI
address becomes the index it has among the amdgpu PCI devices sorted by
address, which is how ROCm SMI / amd-smi enumerate GPUs (by BDF) and so the
``cardN`` / ``gpu`` index those tools and the sysfs source report.
``amdgpu_xcp_*`` partitions and unknown addresses map to nothing (counted
by the caller as ``unmapped_device``).
"""

from __future__ import annotations

import os
import re

_PCI = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def amdgpu_addresses(sysfs_root: str = "/sys") -> list[str]:
    """PCI addresses bound to amdgpu, sorted (lower case); [] when none."""
    d = os.path.join(sysfs_root, "module/amdgpu/drivers/pci:amdgpu")
    try:
        names = os.listdir(d)
    except OSError:
        return []
    return sorted(n.lower() for n in names if _PCI.match(n))


def gpu_key(device_id: str, addresses: list[str]) -> tuple[str, str] | None:
    """``("uuid", …)`` or ``("index", "<n>")`` for one device id, or None.

    >>> gpu_key("0000:83:00.0", ["0000:03:00.0", "0000:83:00.0"])
    ('index', '1')
    >>> gpu_key("GPU-6f0d5c2a", [])
    ('uuid', 'GPU-6f0d5c2a')
    >>> gpu_key("2", []), gpu_key("amdgpu_xcp_3", [])
    (('index', '2'), None)
    """
    d = device_id.strip()
    if d.startswith(("GPU-", "MIG-")):
        return ("uuid", d)
    if d.isdigit():
        return ("index", str(int(d)))
    if _PCI.match(d):
        low = d.lower()
        return ("index", str(addresses.index(low))) if low in addresses else None
    return None

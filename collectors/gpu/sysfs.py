"""Read amdgpu gauges from sysfs (no ROCm needed).

For each ``<root>/class/drm/card<N>/device`` whose ``vendor`` is ``0x1002``
(connector entries such as ``card0-DP-1`` are skipped), in card order;
``gpu_index`` is the position among AMD cards. Files and units (Linux
``Documentation/gpu/amdgpu/thermal.rst`` and ``driver-misc.rst``):

==============================  ===============================  ===========
file                            metric / attributes              file unit
==============================  ===============================  ===========
gpu_busy_percent                utilization task=general         %
mem_busy_percent                utilization task=memory          %
vcn_busy_percent                utilization task=media           %
mem_info_vram_used / _total     memory.usage / memory.limit      bytes
pcie_replay_count               pcie.replays (counter)           count
ras/<block>_err_count           ecc.errors type=correctable|     "ue: N" /
                                uncorrectable (summed)           "ce: N"
hwmon*/power1_average           power sensor=average             µW
hwmon*/power1_input             power sensor=socket              µW
hwmon*/power1_cap               power.limit                      µW
hwmon*/energy1_input            energy (counter)                 µJ
hwmon*/temp<i>_input + _label   temperature sensor=edge|         m°C
                                junction|memory
hwmon*/freq<i>_input + _label   clock sclk|mclk                  Hz
pp_dpm_{sclk,mclk,fclk,socclk}  clock (the level marked ``*``)   MHz text
unique_id / product_name        gpu_uuid / attribute model       text
current_compute_partition,      attributes compute_partition,    text
current_memory_partition        memory_partition
==============================  ===============================  ===========

``hwmon`` clocks win over ``pp_dpm_*`` for the same clock. A file that is
absent or unreadable is omitted; a file with unparsable content is dropped
with reason ``bad_value`` and a message naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path

from collectors.gpu import rows as R

_CARD = re.compile(r"^card(\d+)$")
_DPM = re.compile(r"^\s*\d+:\s*([0-9.]+)\s*([A-Za-z]+)\s*\*\s*$")
_TEMP_LABEL = {"edge": "edge", "junction": "junction", "mem": "memory"}

# file, metric, factor, unit, kind, attributes
_DEVICE_FILES: tuple[tuple[str, str, float, str, str, dict[str, str]], ...] = (
    ("gpu_busy_percent", R.UTILIZATION, 0.01, "1", R.GAUGE, {"hw.gpu.task": "general"}),
    ("mem_busy_percent", R.UTILIZATION, 0.01, "1", R.GAUGE, {"hw.gpu.task": "memory"}),
    ("vcn_busy_percent", R.UTILIZATION, 0.01, "1", R.GAUGE, {"hw.gpu.task": "media"}),
    ("mem_info_vram_used", R.MEMORY_USAGE, 1.0, "By", R.GAUGE, {}),
    ("mem_info_vram_total", R.MEMORY_LIMIT, 1.0, "By", R.GAUGE, {}),
    ("pcie_replay_count", R.PCIE_REPLAYS, 1.0, "1", R.COUNTER, {}),
)
_HWMON_FILES: tuple[tuple[str, str, float, str, str, dict[str, str]], ...] = (
    ("power1_average", R.POWER, 1e-6, "W", R.GAUGE, {"sensor": "average"}),
    ("power1_input", R.POWER, 1e-6, "W", R.GAUGE, {"sensor": "socket"}),
    ("power1_cap", R.POWER_LIMIT, 1e-6, "W", R.GAUGE, {}),
    ("energy1_input", R.ENERGY, 1e-6, "J", R.COUNTER, {}),
)


def _read(path: Path) -> str | None:
    """The stripped text of a sysfs file, ``None`` when it cannot be read. Bytes that
    are not UTF-8 become U+FFFD (a number then fails to parse: ``bad_value``)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _kw(attrs: dict[str, str]) -> dict[str, str]:
    return {k.replace(".", "__"): v for k, v in attrs.items()}


def amd_cards(root: str | Path = "/sys") -> list[Path]:
    """``device`` dirs of AMD (vendor 0x1002) DRM cards under ``root``, by card number."""
    drm = Path(root) / "class" / "drm"
    try:
        names = [(int(m.group(1)), p) for p in drm.iterdir() if (m := _CARD.match(p.name))]
    except OSError:
        return []
    out = []
    for _, p in sorted(names, key=lambda t: t[0]):
        if (_read(p / "device" / "vendor") or "").lower() == "0x1002":
            out.append(p / "device")
    return out


def _number(path: Path, res: R.ParseResult) -> float | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return R.parse_number(text)
    except ValueError as e:
        res.drop("bad_value", f"{path}: {e}")
        return None


def read_card(dev_dir: Path, index: int) -> R.ParseResult:
    """Rows of one card's ``device`` directory."""
    res = R.ParseResult()
    attrs = {"vendor": "amd"}
    for fname, key in (
        ("product_name", "model"),
        ("current_compute_partition", "compute_partition"),
        ("current_memory_partition", "memory_partition"),
    ):
        v = _read(dev_dir / fname)
        if v and not R.is_missing(v):
            attrs[key] = v
    uuid = _read(dev_dir / "unique_id")
    dev = R.Device(index, uuid if uuid and not R.is_missing(uuid) else None, attrs)

    def emit(
        path: Path, metric: str, factor: float, unit: str, kind: str, a: dict[str, str]
    ) -> None:
        v = _number(path, res)
        if v is not None:
            res.rows.append(dev.row(metric, v * factor, unit, kind, **_kw(a)))

    for fname, metric, factor, unit, kind, a in _DEVICE_FILES:
        emit(dev_dir / fname, metric, factor, unit, kind, a)
    _ras(dev_dir, dev, res)
    clocks: set[str] = set()
    for hw in sorted((dev_dir / "hwmon").glob("hwmon*")):
        for fname, metric, factor, unit, kind, a in _HWMON_FILES:
            emit(hw / fname, metric, factor, unit, kind, a)
        for inp in sorted(hw.glob("temp*_input")):
            label = _read(hw / inp.name.replace("_input", "_label")) or inp.name[:-6]
            emit(
                inp, R.TEMPERATURE, 1e-3, "Cel", R.GAUGE, {"sensor": _TEMP_LABEL.get(label, label)}
            )
        for inp in sorted(hw.glob("freq*_input")):
            label = _read(hw / inp.name.replace("_input", "_label")) or inp.name[:-6]
            if label not in clocks:
                clocks.add(label)
                emit(inp, R.CLOCK, 1.0, "Hz", R.GAUGE, {"clock": label})
    for clk in ("sclk", "mclk", "fclk", "socclk"):
        if clk in clocks:
            continue
        hz = _dpm_current(dev_dir / f"pp_dpm_{clk}", res)
        if hz is not None:
            res.rows.append(dev.row(R.CLOCK, hz, "Hz", clock=clk))
    return res


def _dpm_current(path: Path, res: R.ParseResult) -> float | None:
    """Hz of the level marked ``*`` in a ``pp_dpm_*`` file (e.g. ``1: 800Mhz *``)."""
    text = _read(path)
    if text is None:
        return None
    for line in text.splitlines():
        m = _DPM.match(line)
        if m:
            try:
                return float(m.group(1)) * R.scale(m.group(2))
            except KeyError as e:
                res.drop("bad_value", f"{path}: {e}")
                return None
    res.drop("bad_value", f"{path}: no level marked '*'")
    return None


def _ras(dev_dir: Path, dev: R.Device, res: R.ParseResult) -> None:
    totals: dict[str, float] = {}
    for f in sorted((dev_dir / "ras").glob("*_err_count")):
        text = _read(f)
        if text is None:
            continue
        for line in text.splitlines():
            key, _, val = line.partition(":")
            kind = {"ue": "uncorrectable", "ce": "correctable", "de": "deferred"}.get(key.strip())
            if kind is None:
                continue
            try:
                totals[kind] = totals.get(kind, 0.0) + float(val)
            except ValueError:
                res.drop("bad_value", f"{f}: {line!r} is not 'ue: N' / 'ce: N'")
    for kind, v in sorted(totals.items()):
        res.rows.append(dev.row(R.ECC_ERRORS, v, "1", R.COUNTER, type=kind))


def read_sysfs(root: str | Path = "/sys") -> R.ParseResult:
    """Rows of every AMD card under ``root`` (``[]`` rows when there is none)."""
    res = R.ParseResult()
    for i, dev_dir in enumerate(amd_cards(root)):
        res.extend(read_card(dev_dir, i))
    return res

"""Parse ``amd-smi metric --json`` (and ``static --json``) into rows.

Accepted shapes: a bare list ``[{"gpu": 0, ...}, ...]`` (ROCm 6.0-6.3) and
``{"gpu_data": [...]}`` (ROCm 6.4+). Leading non-JSON lines (amd-smi prints
``WARNING: ...`` banners) are skipped. A reading is either a bare number (in
the default unit given below) or ``{"value": v, "unit": u}``; ``"N/A"`` is
omitted. ``MB`` is MiB as amd-smi prints it (bytes // 2**20).

=====================================  ===========================  =========
amd-smi JSON path                      metric / attributes          default
=====================================  ===========================  =========
usage.gfx_activity                     utilization task=general     %
usage.umc_activity                     utilization task=memory      %
usage.mm_activity (or mean vcn_act.)   utilization task=media       %
power.socket_power                     power sensor=socket          W
power.average_socket_power             power sensor=average         W
power.current_socket_power             power sensor=socket          W
power.power_limit / limit.socket_power power.limit                  W
energy.total_energy_consumption        energy (counter)             uJ
temperature.edge / hotspot / mem       temperature edge/junction/   C
                                       memory; hbm_N
clock.gfx_0/mem_0/fclk_0/socclk_0/     clock sclk/mclk/fclk/socclk/ MHz
vclk_0/dclk_0 ``.clk``                 vclk/dclk
mem_usage.used_vram / total_vram       memory.usage / memory.limit  MB
vram.size (static)                     memory.limit                 MB
pcie.replay_count                      pcie.replays (counter)       count
ecc.total_{correctable,uncorrectable,  ecc.errors type=...          count
deferred}_count
throttle.accumulation_counter          throttle.samples (counter)   ticks
throttle.<v>_accumulated               throttle.residency reason=v  ticks
throttle.<v>_violation_status          throttled reason=...         ACTIVE
indep_throttle_status / throttle_stat. throttled (see throttle.py)  bitmask
=====================================  ===========================  =========

Identity (from ``static``, else from the metric document when present):
``gpu_uuid`` = ``uuid`` / ``asic.asic_serial`` / ``board.product_serial``
(not ``"0"``); attributes ``model`` (``asic.market_name``),
``compute_partition`` / ``memory_partition`` (``partition``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from collectors.gpu import rows as R
from collectors.gpu import throttle


def _strip_banner(text: str) -> str:
    for i, line in enumerate(text.splitlines(keepends=True)):
        if line.lstrip().startswith(("[", "{")):
            return "".join(text.splitlines(keepends=True)[i:])
    return text


def load_gpu_list(text: str, where: str = "amd-smi") -> list[dict[str, Any]]:
    """The per-GPU objects of an amd-smi JSON document (both shapes).

    Raises :class:`~collectors.gpu.rows.ParseError` ``bad_json`` (with line
    and column) or ``bad_shape``.
    """
    try:
        doc = json.loads(_strip_banner(text))
    except json.JSONDecodeError as e:
        raise R.ParseError("bad_json", f"{where}: line {e.lineno} column {e.colno}: {e.msg}") from e
    except RecursionError as e:  # '[[[[...' deeper than the interpreter's stack
        raise R.ParseError("bad_json", f"{where}: JSON nested too deeply") from e
    if isinstance(doc, dict) and "gpu_data" in doc:
        doc = doc["gpu_data"]
    if not isinstance(doc, list):
        raise R.ParseError("bad_shape", f"{where}: expected a list or {{'gpu_data': [...]}}")
    return [g for g in doc if isinstance(g, dict)]


def reading(value: object, default_unit: str, where: str) -> float | None:
    """``value`` (number, numeric string or ``{"value", "unit"}``) in base units.

    Returns ``None`` when missing; raises ``ValueError`` naming ``where`` for a
    non-numeric value or an unknown unit.

    >>> reading({"value": 1600, "unit": "MHz"}, "MHz", "x")
    1600000000.0
    >>> reading(42, "%", "x")
    0.42
    >>> reading({"value": "N/A", "unit": "W"}, "W", "x") is None
    True
    """
    unit = default_unit
    if isinstance(value, dict):
        unit = str(value.get("unit", default_unit))
        value = value.get("value")
    try:
        num = R.parse_number(value)
        factor = R.scale(unit)
    except (ValueError, KeyError) as e:
        raise ValueError(f"{where}: {e}") from None
    return None if num is None else num * factor


def _section(gpu: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = gpu.get(key)
    return v if isinstance(v, dict) else {}


def device_of(gpu: Mapping[str, Any], fallback: R.Device | None = None) -> R.Device:
    """Resource attributes of one amd-smi GPU object (``static`` fields)."""
    dev = R.Device(R.gpu_index(gpu.get("gpu")), None, {"vendor": "amd"})
    if fallback is not None:
        dev.uuid = fallback.uuid
        dev.attrs.update(fallback.attrs)
    asic = _section(gpu, "asic")
    board = _section(gpu, "board")
    for v in (gpu.get("uuid"), asic.get("asic_serial"), board.get("product_serial")):
        if isinstance(v, str) and not R.is_missing(v) and v.strip() not in {"", "0"}:
            dev.uuid = v.strip()
            break
    name = asic.get("market_name")
    if isinstance(name, str) and not R.is_missing(name):
        dev.attrs["model"] = name.strip()
    part = gpu.get("partition")
    if isinstance(part, dict):
        for key in ("compute_partition", "memory_partition"):
            v = part.get(key)
            if isinstance(v, str) and not R.is_missing(v):
                dev.attrs[key] = v.strip()
    return dev


# section, key, metric, default unit, base unit, kind, attributes
_SIMPLE: tuple[tuple[str, str, str, str, str, str, dict[str, str]], ...] = (
    ("usage", "gfx_activity", R.UTILIZATION, "%", "1", R.GAUGE, {"hw.gpu.task": "general"}),
    ("usage", "umc_activity", R.UTILIZATION, "%", "1", R.GAUGE, {"hw.gpu.task": "memory"}),
    ("usage", "mm_activity", R.UTILIZATION, "%", "1", R.GAUGE, {"hw.gpu.task": "media"}),
    ("power", "socket_power", R.POWER, "W", "W", R.GAUGE, {"sensor": "socket"}),
    ("power", "current_socket_power", R.POWER, "W", "W", R.GAUGE, {"sensor": "socket"}),
    ("power", "average_socket_power", R.POWER, "W", "W", R.GAUGE, {"sensor": "average"}),
    ("power", "power_limit", R.POWER_LIMIT, "W", "W", R.GAUGE, {}),
    ("limit", "socket_power", R.POWER_LIMIT, "W", "W", R.GAUGE, {}),
    ("energy", "total_energy_consumption", R.ENERGY, "uJ", "J", R.COUNTER, {}),
    ("temperature", "edge", R.TEMPERATURE, "C", "Cel", R.GAUGE, {"sensor": "edge"}),
    ("temperature", "hotspot", R.TEMPERATURE, "C", "Cel", R.GAUGE, {"sensor": "junction"}),
    ("temperature", "mem", R.TEMPERATURE, "C", "Cel", R.GAUGE, {"sensor": "memory"}),
    ("mem_usage", "used_vram", R.MEMORY_USAGE, "MB", "By", R.GAUGE, {}),
    ("mem_usage", "total_vram", R.MEMORY_LIMIT, "MB", "By", R.GAUGE, {}),
    ("vram", "size", R.MEMORY_LIMIT, "MB", "By", R.GAUGE, {}),
    ("pcie", "replay_count", R.PCIE_REPLAYS, "", "1", R.COUNTER, {}),
    ("ecc", "total_correctable_count", R.ECC_ERRORS, "", "1", R.COUNTER, {"type": "correctable"}),
    (
        "ecc",
        "total_uncorrectable_count",
        R.ECC_ERRORS,
        "",
        "1",
        R.COUNTER,
        {"type": "uncorrectable"},
    ),
    ("ecc", "total_deferred_count", R.ECC_ERRORS, "", "1", R.COUNTER, {"type": "deferred"}),
    ("throttle", "accumulation_counter", R.VIOLATION_SAMPLES, "", "1", R.COUNTER, {}),
)
_CLOCKS: Mapping[str, str] = {
    "gfx_0": "sclk",
    "mem_0": "mclk",
    "fclk_0": "fclk",
    "socclk_0": "socclk",
    "vclk_0": "vclk",
    "dclk_0": "dclk",
}


def _kw(attrs: Mapping[str, str]) -> dict[str, str]:
    return {k.replace(".", "__"): v for k, v in attrs.items()}


def parse_gpu(gpu: Mapping[str, Any], dev: R.Device, where: str = "amd-smi") -> R.ParseResult:
    """Rows of one amd-smi (or amdsmi-library-shaped) GPU object."""
    res = R.ParseResult()
    w = f"{where}: gpu {dev.index}"
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def add(
        metric: str,
        raw: object,
        dunit: str,
        unit: str,
        kind: str,
        attrs: Mapping[str, str],
        field: str,
    ) -> None:
        try:
            v = reading(raw, dunit, f"{w}: field {field!r}")
        except ValueError as e:
            res.drop("bad_value", str(e))
            return
        if v is None:
            return
        row = dev.row(metric, v, unit, kind, **_kw(attrs))
        key = (metric, row.attributes)
        if key not in seen:  # first of several aliases wins
            seen.add(key)
            res.rows.append(row)

    for section, key, metric, dunit, unit, kind, attrs in _SIMPLE:
        sec = gpu.get(section)
        if isinstance(sec, dict) and key in sec:
            add(metric, sec[key], dunit, unit, kind, attrs, f"{section}.{key}")
    usage = gpu.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("vcn_activity"), list):
        vals = []
        for i, x in enumerate(usage["vcn_activity"]):
            try:
                r = reading(x, "%", f"{w}: field 'usage.vcn_activity[{i}]'")
            except ValueError as e:
                res.drop("bad_value", str(e))
                continue
            if r is not None:
                vals.append(r)
        if vals:
            add(
                R.UTILIZATION,
                sum(vals) / len(vals),
                "",
                "1",
                R.GAUGE,
                {"hw.gpu.task": "media"},
                "usage.vcn_activity",
            )
    temps = gpu.get("temperature")
    if isinstance(temps, dict):
        for key, raw in temps.items():
            if key.startswith("hbm_"):
                add(R.TEMPERATURE, raw, "C", "Cel", R.GAUGE, {"sensor": key}, f"temperature.{key}")
    clocks = gpu.get("clock")
    if isinstance(clocks, dict):
        for key, name in _CLOCKS.items():
            c = clocks.get(key)
            if isinstance(c, dict) and "clk" in c:
                add(R.CLOCK, c["clk"], "MHz", "Hz", R.GAUGE, {"clock": name}, f"clock.{key}.clk")
    _throttle(gpu, dev, res, add)
    return res


def _throttle(gpu: Mapping[str, Any], dev: R.Device, res: R.ParseResult, add: Any) -> None:
    thr = gpu.get("throttle")
    active: dict[str, bool] | None = None
    if isinstance(thr, dict):
        for v in throttle.VIOLATIONS:
            if f"{v}_accumulated" in thr:
                add(
                    R.VIOLATION_TICKS,
                    thr[f"{v}_accumulated"],
                    "",
                    "1",
                    R.COUNTER,
                    {"reason": v},
                    f"throttle.{v}_accumulated",
                )
            status = thr.get(f"{v}_violation_status")
            if isinstance(status, str) and not R.is_missing(status):
                active = active or dict.fromkeys(throttle.REASONS, False)
                if status.strip().upper() == "ACTIVE":
                    active[throttle.VIOLATION_REASON[v]] = True
    metrics = _section(gpu, "metrics") or gpu
    indep = metrics.get("indep_throttle_status")
    legacy = metrics.get("throttle_status")
    if indep is not None and not R.is_missing(indep):
        try:
            mask = int(R.parse_number(indep) or 0)
        except ValueError as e:
            res.drop("bad_value", f"gpu {dev.index}: field 'indep_throttle_status': {e}")
        else:
            add(
                R.THROTTLE_STATUS,
                mask,
                "",
                "1",
                R.GAUGE,
                {"bitmap": "indep"},
                "indep_throttle_status",
            )
            decoded = throttle.decode_indep(mask)
            active = {k: v or (active or {}).get(k, False) for k, v in decoded.items()}
    elif isinstance(legacy, int | float) and not isinstance(legacy, bool):
        add(R.THROTTLE_STATUS, legacy, "", "1", R.GAUGE, {"bitmap": "asic"}, "throttle_status")
        if active is None:
            res.rows.append(dev.row(R.THROTTLED, 1.0 if legacy else 0.0, "1", reason="any"))
    if active is not None:
        res.rows.extend(throttle.throttled_rows(dev, active))


def parse_static(
    text: str, where: str = "amd-smi static"
) -> tuple[dict[int, R.Device], R.ParseResult]:
    """``amd-smi static --json`` -> (devices by index, rows such as power.limit)."""
    devices: dict[int, R.Device] = {}
    res = R.ParseResult()
    for gpu in load_gpu_list(text, where):
        dev = device_of(gpu)
        if dev.index is None:
            res.drop("bad_shape", f"{where}: a GPU object has no integer 'gpu' key")
            continue
        devices[dev.index] = dev
        res.extend(parse_gpu(gpu, dev, where))
    return devices, res


def parse_metric(
    text: str, devices: Mapping[int, R.Device] | None = None, where: str = "amd-smi metric"
) -> R.ParseResult:
    """``amd-smi metric --json`` -> rows; ``devices`` (from static) add identity.

    >>> r = parse_metric('{"gpu_data": [{"gpu": 0, "usage": {"gfx_activity": 50}}]}')
    >>> [(x.metric, x.value, x.attr("hw.gpu.task")) for x in r.rows]
    [('hw.gpu.utilization', 0.5, 'general')]
    """
    res = R.ParseResult()
    for gpu in load_gpu_list(text, where):
        idx = R.gpu_index(gpu.get("gpu"))
        if idx is None:
            res.drop("bad_shape", f"{where}: a GPU object has no integer 'gpu' key "
                                  f"in [0, {R.MAX_GPU_INDEX}]")
            continue
        dev = device_of(gpu, (devices or {}).get(idx))
        res.extend(parse_gpu(gpu, dev, where))
    return res

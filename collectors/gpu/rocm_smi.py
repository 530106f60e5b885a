"""Parse legacy ``rocm-smi --json`` output into ``gauge_sample`` rows.

Input: ``{"card0": {"<field>": "<string>", ...}, ..., "system": {...}}``.
Every value is a string; key names vary across ROCm 4.3-6.x (both spellings
are accepted, see :data:`FIELDS`). ``cardN`` gives ``gpu_index = N``.
``"N/A"``, ``"N/A (Secondary die)"`` and absent keys are omitted; unknown
keys (firmware versions, topology...) are ignored; a known key with a
non-numeric value is dropped with reason ``bad_value``.

Identity: ``gpu_uuid`` is ``Unique ID`` (hex), else ``Serial Number`` (unless
``"0"`` or N/A); attribute ``model`` is ``Device Name`` / ``Card Series`` /
``Card series`` when it is not a bare hex id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from collectors.gpu import rows as R
from collectors.gpu import throttle

# field name -> (metric, factor to base unit, unit, kind, attributes)
Spec = tuple[str, float, str, str, dict[str, str]]

FIELDS: Mapping[str, Spec] = {
    "GPU use (%)": (R.UTILIZATION, 0.01, "1", R.GAUGE, {"hw.gpu.task": "general"}),
    # ROCm <= 5.7 "GPU memory use (%)" is the memory busy percent; renamed in 6.0
    "GPU memory use (%)": (R.UTILIZATION, 0.01, "1", R.GAUGE, {"hw.gpu.task": "memory"}),
    "GPU Memory Read/Write Activity (%)": (
        R.UTILIZATION,
        0.01,
        "1",
        R.GAUGE,
        {"hw.gpu.task": "memory"},
    ),
    # rsmi_utilization_count_get coarse-grain counters: accumulated busy (%-ticks),
    # only their ratio and increase are used
    "GFX Activity": (R.ACTIVITY, 1.0, "1", R.COUNTER, {"hw.gpu.task": "general"}),
    "Memory Activity": (R.ACTIVITY, 1.0, "1", R.COUNTER, {"hw.gpu.task": "memory"}),
    "Average Graphics Package Power (W)": (R.POWER, 1.0, "W", R.GAUGE, {"sensor": "average"}),
    "Current Socket Graphics Package Power (W)": (R.POWER, 1.0, "W", R.GAUGE, {"sensor": "socket"}),
    "Max Graphics Package Power (W)": (R.POWER_LIMIT, 1.0, "W", R.GAUGE, {}),
    "Temperature (Sensor edge) (C)": (R.TEMPERATURE, 1.0, "Cel", R.GAUGE, {"sensor": "edge"}),
    "Temperature (Sensor junction) (C)": (
        R.TEMPERATURE,
        1.0,
        "Cel",
        R.GAUGE,
        {"sensor": "junction"},
    ),
    "Temperature (Sensor memory) (C)": (R.TEMPERATURE, 1.0, "Cel", R.GAUGE, {"sensor": "memory"}),
    "VRAM Total Memory (B)": (R.MEMORY_LIMIT, 1.0, "By", R.GAUGE, {}),
    "VRAM Total Used Memory (B)": (R.MEMORY_USAGE, 1.0, "By", R.GAUGE, {}),
    "PCIe Replay Count": (R.PCIE_REPLAYS, 1.0, "1", R.COUNTER, {}),
    "Accumulated Energy (uJ)": (R.ENERGY, 1e-6, "J", R.COUNTER, {}),
    "throttle_status": (R.THROTTLE_STATUS, 1.0, "1", R.GAUGE, {}),
}
"""Known ``rocm-smi --json`` keys and their mapping."""

_HBM = re.compile(r"^Temperature \(Sensor HBM (\d+)\) \(C\)$")
_CLK = re.compile(r"^(sclk|mclk|fclk|socclk|dcefclk|vclk\d*|dclk\d*) clock speed:$")
_CURRENT_CLK: Mapping[str, str] = {"current_gfxclk (MHz)": "sclk", "current_uclk (MHz)": "mclk"}
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_MODEL_KEYS = ("Device Name", "Card Series", "Card series")


def _device(index: int, card: Mapping[str, Any]) -> R.Device:
    uuid = None
    for key in ("Unique ID", "Serial Number"):
        v = card.get(key)
        if isinstance(v, str) and not R.is_missing(v) and v.strip() not in {"0", ""}:
            uuid = v.strip()
            break
    attrs = {"vendor": "amd"}
    for key in _MODEL_KEYS:
        v = card.get(key)
        if isinstance(v, str) and not R.is_missing(v) and not _HEX.match(v.strip()):
            attrs["model"] = v.strip()
            break
    return R.Device(index, uuid, attrs)


_Plan = tuple[str, float, str, str, dict[str, str]] | None
_PLANS: dict[str, _Plan] = {}
_MAX_PLANS = 4096  # distinct field names remembered (rocm-smi has ~130); past it: not cached


def _plan(key: str) -> _Plan:
    """``key``'s mapping (metric, factor, unit, kind, attributes), ``None`` for a
    field that is not a reading. Memoised: a poll sees the same ~130 names."""
    got = _PLANS.get(key, False)
    if got is not False:
        return got  # type: ignore[return-value]
    plan: _Plan
    spec = FIELDS.get(key)
    if spec is not None:
        plan = spec
    elif (m := _HBM.match(key)) is not None:
        plan = (R.TEMPERATURE, 1.0, "Cel", R.GAUGE, {"sensor": f"hbm_{m.group(1)}"})
    elif (m := _CLK.match(key)) is not None:
        plan = (R.CLOCK, 1e6, "Hz", R.GAUGE, {"clock": m.group(1)})
    elif key in _CURRENT_CLK:
        plan = (R.CLOCK, 1e6, "Hz", R.GAUGE, {"clock": _CURRENT_CLK[key]})
    else:
        plan = None
    if len(_PLANS) < _MAX_PLANS:
        _PLANS[key] = plan
    return plan


# One card's readings, planned once per key set: (key, metric, factor, unit,
# kind, the row's attributes with the device's merged in, sorted; the clock
# domain of a clock reading, else None)
_CardPlan = list[tuple[str, str, float, str, str, tuple[tuple[str, str], ...], str | None]]
_CARD_PLANS: dict[tuple[object, ...], _CardPlan] = {}
_MAX_CARD_PLANS = 64  # distinct (device, key set) pairs remembered; past it: planned each poll


def _card_plan(dev: R.Device, keys: tuple[str, ...]) -> _CardPlan:
    """The readings among ``keys`` and their rows' fixed parts, memoised: a
    poll of the same GPUs sees the same keys in the same order, so the
    ~70 keys of a card are looked at once, not at every poll."""
    memo = (dev.index, dev.uuid, tuple(dev.attrs.items()), keys)
    got = _CARD_PLANS.get(memo)
    if got is not None:
        return got
    plan: _CardPlan = []
    for key in keys:
        p = _plan(key)
        if p is not None:
            metric, factor, unit, kind, attrs = p
            plan.append((key, metric, factor, unit, kind,
                         dev.row(metric, 0.0, unit, kind, **_kw(attrs)).attributes,
                         attrs.get("clock") if metric == R.CLOCK else None))
    if len(_CARD_PLANS) < _MAX_CARD_PLANS:
        _CARD_PLANS[memo] = plan
    return plan


def parse_card(index: int, card: Mapping[str, Any], where: str = "") -> R.ParseResult:
    """Rows of one ``cardN`` object; ``where`` prefixes error messages."""
    res = R.ParseResult()
    dev = _device(index, card)
    seen_clocks: set[str] = set()
    rows = res.rows
    throttled: tuple[tuple[str, str], ...] | None = None
    for key, metric, factor, unit, kind, attributes, clock in _card_plan(dev, tuple(card)):
        raw = card[key]
        try:
            value = R.parse_number(raw)
        except ValueError as e:
            res.drop("bad_value", f"{where}card{index}: field {key!r}: {e}")
            continue
        if value is None:
            continue
        if clock is not None:
            if clock in seen_clocks:
                continue
            seen_clocks.add(clock)
        rows.append(R.Row(metric, value * factor, unit, index, dev.uuid, kind, attributes))
        if metric == R.THROTTLE_STATUS:
            if throttled is None:
                throttled = dev.row(R.THROTTLED, 0.0, "1", reason="any").attributes
            rows.append(R.Row(R.THROTTLED, 1.0 if value else 0.0, "1", index, dev.uuid,
                              R.GAUGE, throttled))
    return res


def _kw(attrs: Mapping[str, str]) -> dict[str, str]:
    return {k.replace(".", "__"): v for k, v in attrs.items()}


_CARD = re.compile(r"^card([0-9]{1,10})$")


def parse_rocm_smi(text: str, where: str = "rocm-smi") -> R.ParseResult:
    """Parse one ``rocm-smi --json`` document.

    Raises :class:`~collectors.gpu.rows.ParseError` (``bad_json`` with the
    line and column, or ``bad_shape``) when the document is unusable.

    >>> r = parse_rocm_smi('{"card1": {"GPU use (%)": "37", "Unique ID": "N/A"}}')
    >>> [(x.metric, x.value, x.gpu_index) for x in r.rows]
    [('hw.gpu.utilization', 0.37, 1)]
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise R.ParseError("bad_json", f"{where}: line {e.lineno} column {e.colno}: {e.msg}") from e
    except RecursionError as e:  # '[[[[...' deeper than the interpreter's stack
        raise R.ParseError("bad_json", f"{where}: JSON nested too deeply") from e
    if not isinstance(doc, dict):
        raise R.ParseError("bad_shape", f"{where}: top level is {type(doc).__name__}, not object")
    res = R.ParseResult()
    for key, card in doc.items():
        m = _CARD.match(key)
        if m is None:
            continue
        if R.gpu_index(int(m.group(1))) is None:
            res.drop("bad_shape", f"{where}: {key[:40]}: card number out of range")
            continue
        if not isinstance(card, dict):
            res.drop("bad_shape", f"{where}: {key} is {type(card).__name__}, not object")
            continue
        res.extend(parse_card(int(m.group(1)), card, f"{where}: "))
    return res


__all__ = ["FIELDS", "parse_card", "parse_rocm_smi", "throttle"]

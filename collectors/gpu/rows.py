"""Shared building blocks of the ``gpu`` parsers: metric names, units, rows.

Every parser turns one tool's output into a list of :class:`Row` and then a
``gauge_sample`` table with :func:`to_table`. Values are already in base units
(W, Cel, Hz, By, ratio 0-1, J, s); a value the tool reports as missing
(``"N/A"``, ``"N/A (Secondary die)"``, ``""``, ``null``) is omitted, never 0.

>>> parse_number("(800Mhz)")
800.0
>>> parse_number("N/A (Secondary die)") is None
True
>>> scale("MHz")
1000000.0
"""

from __future__ import annotations

import collections
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from exporter import schema


def call_or_none(mod: Any, name: str, *args: Any) -> Any:
    """``mod.name(*args)`` of a vendor library (amdsmi, pynvml), or ``None``
    when the call raises or does not exist (a reading the ASIC does not have)."""
    try:
        return getattr(mod, name)(*args)
    except Exception:  # amdsmi / NVML raise their own "not supported" errors
        return None


# --- metric names (OpenTelemetry hw.gpu.* style; see docs/gpu-gauges.md) -----
UTILIZATION = "hw.gpu.utilization"  # unit 1, attr hw.gpu.task=general|memory|media
ACTIVITY = "hw.gpu.activity"  # 1, counter, attr hw.gpu.task=general|memory (accumulated busy)
MEMORY_USAGE = "hw.gpu.memory.usage"  # By
MEMORY_LIMIT = "hw.gpu.memory.limit"  # By
POWER = "hw.gpu.power"  # W, attr sensor=average|socket
POWER_LIMIT = "hw.gpu.power.limit"  # W (power cap)
ENERGY = "hw.gpu.energy"  # J, counter
TEMPERATURE = "hw.gpu.temperature"  # Cel, attr sensor=edge|junction|memory|hbm_N
CLOCK = "hw.gpu.clock"  # Hz, attr clock=sclk|mclk|fclk|socclk|vclk|dclk
PCIE_REPLAYS = "hw.gpu.pcie.replays"  # 1, counter
ECC_ERRORS = "hw.gpu.ecc.errors"  # 1, counter, attr type=correctable|uncorrectable|deferred
THROTTLE_STATUS = "hw.gpu.throttle.status"  # 1, raw bitmask as reported
THROTTLED = "hw.gpu.throttled"  # 1 (0 or 1), attr reason (bounded, see throttle.py)
VIOLATION_TICKS = "hw.gpu.throttle.residency"  # 1, counter, attr reason (firmware ticks)
VIOLATION_SAMPLES = "hw.gpu.throttle.samples"  # 1, counter (firmware accumulation ticks)
VIOLATION_RATIO = "hw.gpu.throttle.ratio"  # 1, residency share over the interval

GAUGE = "gauge"
COUNTER = "counter"

_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")

_SCALE: Mapping[str, float] = {
    "%": 0.01,
    "W": 1.0,
    "mW": 1e-3,
    "uW": 1e-6,
    "µW": 1e-6,
    "C": 1.0,
    "°C": 1.0,
    "Cel": 1.0,
    "mC": 1e-3,
    "Hz": 1.0,
    "KHz": 1e3,
    "kHz": 1e3,
    "MHz": 1e6,
    "Mhz": 1e6,
    "GHz": 1e9,
    "B": 1.0,
    "KB": 1024.0,
    "MB": 1024.0**2,  # amd-smi prints MiB (bytes // 2**20) labelled "MB"
    "GB": 1024.0**3,
    "J": 1.0,
    "mJ": 1e-3,
    "uJ": 1e-6,
    "µJ": 1e-6,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "ns": 1e-9,
    "": 1.0,
}


def scale(unit: str) -> float:
    """Factor that turns a value in ``unit`` (as tools print it) into base units.

    Raises ``KeyError`` naming the unit when it is not known.
    """
    try:
        return _SCALE[unit.strip()]
    except KeyError:
        raise KeyError(f"unknown unit {unit!r}") from None


def is_missing(value: object) -> bool:
    """True for the tools' spellings of "no reading": None, "", "N/A...", "NA"."""
    if value is None:
        return True
    if isinstance(value, str):
        v = value.strip().upper()
        return v == "" or v.startswith("N/A") or v in {"NA", "NONE", "UNSUPPORTED"}
    return False


def parse_number(value: object) -> float | None:
    """The first number in ``value`` (int, float, or text like ``"(800Mhz)"``).

    Returns ``None`` for a missing reading (see :func:`is_missing`); raises
    ``ValueError`` for text that holds no number at all.

    >>> parse_number("3 (2.5GT/s x8)")
    3.0
    >>> parse_number(91)
    91.0
    """
    if type(value) is str and value.isascii() and "_" not in value:  # "53.0": most readings
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if number - number == 0:  # finite: "nan" and "inf" are not readings
                return number
    if is_missing(value):
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        m = _NUM.search(value)
        if m is None:
            raise ValueError(f"not a number: {value!r}")
        return float(m.group(0))
    raise ValueError(f"not a number: {value!r}")


MAX_GPU_INDEX = (1 << 31) - 1


def gpu_index(value: object) -> int | None:
    """``value`` when it is a usable GPU index (an int in [0, 2**31), not a bool),
    else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_GPU_INDEX:
        return value
    return None


def utf8(s: str) -> str:
    """``s`` with lone surrogates (from ``\\udXXX`` JSON escapes) replaced by ``?``,
    so Arrow can encode it."""
    try:
        s.encode()
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode()
    return s


class Row(NamedTuple):
    """One GAUGE_SAMPLE row before conversion to Arrow (value in base units).
    A named tuple: a poll builds tens of them, at a seventh of a frozen
    dataclass's cost each."""

    metric: str
    value: float
    unit: str
    gpu_index: int | None
    gpu_uuid: str | None = None
    kind: str = GAUGE
    attributes: tuple[tuple[str, str], ...] = ()

    def attr(self, key: str) -> str | None:
        """The value of attribute ``key``, or ``None``."""
        return dict(self.attributes).get(key)


@dataclass
class ParseResult:
    """What a parser returns: rows plus the fields it had to drop.

    ``drops`` counts dropped fields or documents by a bounded reason token
    (``bad_value``, ``bad_unit``, ``bad_json``, ``bad_shape``...);
    ``errors`` holds one ``(reason, message)`` per drop, the message naming
    the field or file.
    """

    rows: list[Row] = field(default_factory=list)
    drops: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: list[tuple[str, str]] = field(default_factory=list)

    def drop(self, reason: str, message: str) -> None:
        """Count one drop under ``reason`` and keep its message."""
        self.drops[reason] += 1
        self.errors.append((reason, message))

    def extend(self, other: ParseResult) -> None:
        """Append ``other``'s rows, drops and errors to this result."""
        self.rows.extend(other.rows)
        self.drops.update(other.drops)
        self.errors.extend(other.errors)


class ParseError(ValueError):
    """A whole document cannot be used; ``reason`` is a bounded drop token."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Device:
    """Resource attributes of one GPU: index, stable id, and bounded labels."""

    index: int | None
    uuid: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)

    def row(
        self,
        metric: str,
        value: float,
        unit: str,
        kind: str = GAUGE,
        **attrs: str,
    ) -> Row:
        """A :class:`Row` of this device; ``attrs`` keys may use ``__`` for ``.``."""
        merged = dict(self.attrs)
        merged.update({k.replace("__", "."): v for k, v in attrs.items()})
        return Row(metric, value, unit, self.index, self.uuid, kind, tuple(sorted(merged.items())))


def _encodable(strings: list[str]) -> bool:
    """True when every string encodes as UTF-8 (one check for the whole poll)."""
    try:
        "".join(strings).encode()
    except UnicodeEncodeError:
        return False
    return True


def to_table(rows: list[Row], *, ts_ns: int, source: str) -> pa.RecordBatch:
    """Rows as one ``gauge_sample`` record batch (schema-conformant; text from the
    tools that Arrow cannot encode as UTF-8 is repaired with :func:`utf8`)."""
    n = len(rows)
    uuids = [r.gpu_uuid for r in rows]
    attrs = [list(r.attributes) for r in rows]
    text = [u for u in uuids if u is not None] + [x for a in attrs for kv in a for x in kv]
    if not _encodable(text):  # lone surrogates from \udXXX escapes: repair each string
        uuids = [None if u is None else utf8(u) for u in uuids]
        attrs = [[(utf8(k), utf8(v)) for k, v in a] for a in attrs]
    arrays = [
        pa.array([ts_ns] * n, pa.int64()),
        pa.array([r.metric for r in rows], pa.string()).dictionary_encode(),
        pa.array([float(r.value) for r in rows], pa.float64()),
        pa.array([r.kind for r in rows], pa.string()).dictionary_encode(),
        pa.array([r.unit for r in rows], pa.string()).dictionary_encode(),
        pa.array([source] * n, pa.string()).dictionary_encode(),
        pa.array([r.gpu_index for r in rows], pa.int64()),
        pa.array(uuids, pa.string()),
        pa.array(attrs, pa.map_(pa.string(), pa.string())),
    ]
    return schema.conform("gauge_sample",
                          pa.RecordBatch.from_arrays(arrays, schema=schema.GAUGE_SAMPLE))


_TS = schema.GAUGE_SAMPLE.get_field_index("ts_ns")
_VALUE = schema.GAUGE_SAMPLE.get_field_index("value")


class TableCache:
    """:func:`to_table` for a poller whose rows keep their identities from poll
    to poll (the same GPUs and readings, in the same order): the columns that
    name the series (metric, kind, unit, source, gpu_index, gpu_uuid,
    attributes) are built once and reused while the identities stay the same;
    each call builds only ``ts_ns`` and ``value``. Not thread-safe: one per
    collector.

    >>> c = TableCache()
    >>> rows = [Row(POWER, 90.0, "W", 0)]
    >>> c.build(rows, ts_ns=1, source="sysfs").equals(to_table(rows, ts_ns=1, source="sysfs"))
    True
    >>> c.build([Row(POWER, 91.0, "W", 0)], ts_ns=2, source="sysfs").column("value")[0].as_py()
    91.0
    >>> c.reused
    1
    """

    def __init__(self) -> None:
        self._ids: tuple[object, ...] | None = None
        self._columns: list[pa.Array] = []
        self.reused = 0
        """Calls that reused the series columns of the call before."""

    def build(self, rows: list[Row], *, ts_ns: int, source: str) -> pa.RecordBatch:
        """As :func:`to_table` (same batch, same errors)."""
        ids = (source, *((r.metric, r.unit, r.kind, r.gpu_index, r.gpu_uuid, r.attributes)
                         for r in rows))
        if ids != self._ids:
            batch = to_table(rows, ts_ns=ts_ns, source=source)
            self._ids, self._columns = ids, batch.columns
            return batch
        self.reused += 1
        n = len(rows)
        cols = list(self._columns)
        cols[_TS] = pa.array([ts_ns] * n, pa.int64())
        cols[_VALUE] = pa.array([float(r.value) for r in rows], pa.float64())
        return pa.RecordBatch.from_arrays(cols, schema=schema.GAUGE_SAMPLE)

"""Bounded per-reason counts of rejected input rows, with a few examples.

Every parser in :mod:`collectors.rocprof` takes a :class:`Rejects` and adds
to it instead of raising on bad rows, so one bad line never stops a file.

``reason`` is a short bounded token (one of :data:`REASONS`), suitable as a
``reason`` label of ``aaco_exporter_events_dropped_total``. Examples name
``file:line`` and are capped at :data:`MAX_EXAMPLES` per reason.

>>> r = Rejects()
>>> r.add("not_numeric", "k.csv", 7, "column 'End_Timestamp' value 'abc'")
>>> r.counts, r.examples["not_numeric"]
({'not_numeric': 1}, ["k.csv:7: not_numeric: column 'End_Timestamp' value 'abc'"])
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

REASONS: frozenset[str] = frozenset(
    {
        "truncated",  # last line cut off (no trailing newline, too few fields)
        "column_count",  # a line with the wrong number of fields
        "missing_column",  # a required column is absent from the header (whole file)
        "not_numeric",  # a numeric field that does not parse
        "missing_value",  # a required field is empty
        "end_before_start",  # end timestamp < start timestamp
        "duplicate_id",  # dispatch / correlation id seen twice
        "unknown_format",  # file matches no known format (whole file)
        "bad_json",  # JSON that does not parse or lacks required keys
        "io_error",  # file vanished / unreadable
        "overlapping_marker",  # an iteration marker range overlapping an earlier one (markers.py)
    }
)
"""Reasons a row (or a whole file) is dropped."""

NOTES: frozenset[str] = frozenset({"name_truncated", "not_utf8", "launch_mismatch"})
"""Reasons a row is kept but modified (counted in :attr:`Rejects.notes`)."""

MAX_EXAMPLES = 3


@dataclass
class Rejects:
    """Drops per reason (``counts``), kept-but-fixed rows (``notes``) and up to
    :data:`MAX_EXAMPLES` ``"file:line: reason: detail"`` messages per reason.
    Safe to add to from several threads (a CSV file's reader thread counts the
    lines it drops while its rows are checked in another)."""

    counts: dict[str, int] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, reason: str, file: str, line: int | None, detail: str, n: int = 1) -> None:
        """Count ``n`` dropped rows for ``reason`` (or a note, see :data:`NOTES`).

        Raises ``ValueError`` for a reason outside :data:`REASONS` | :data:`NOTES`
        (keeps the label set bounded)."""
        if n <= 0:
            return
        if reason not in REASONS | NOTES:
            raise ValueError(f"unknown reject reason {reason!r}")
        bucket = self.notes if reason in NOTES else self.counts
        with self._lock:
            bucket[reason] = bucket.get(reason, 0) + n
            ex = self.examples.setdefault(reason, [])
            if len(ex) < MAX_EXAMPLES:
                where = f"{file}:{line}" if line is not None else file
                ex.append(f"{where}: {reason}: {detail}")

    def count(self, reason: str, n: int) -> None:
        """Count ``n`` more rows for ``reason`` without an example message."""
        if n <= 0:
            return
        if reason not in REASONS | NOTES:
            raise ValueError(f"unknown reject reason {reason!r}")
        bucket = self.notes if reason in NOTES else self.counts
        with self._lock:
            bucket[reason] = bucket.get(reason, 0) + n

    @property
    def total(self) -> int:
        """Number of dropped rows (notes excluded)."""
        return sum(self.counts.values())

    def merge(self, other: Rejects) -> None:
        """Add ``other``'s counts, notes and (capped) examples into this one."""
        with self._lock:
            for src, dst in ((other.counts, self.counts), (other.notes, self.notes)):
                for k, v in src.items():
                    dst[k] = dst.get(k, 0) + v
            for k, ex in other.examples.items():
                mine = self.examples.setdefault(k, [])
                mine.extend(ex[: max(0, MAX_EXAMPLES - len(mine))])

    def summary(self) -> str:
        """One line: ``"3 dropped (not_numeric=2, truncated=1); notes: ..."``."""
        parts = ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        s = f"{self.total} dropped ({parts})" if parts else "0 dropped"
        if self.notes:
            s += "; notes: " + ", ".join(f"{k}={v}" for k, v in sorted(self.notes.items()))
        return s

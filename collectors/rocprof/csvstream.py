"""Streaming, validating CSV reader shared by every rocprof CSV format.

:class:`CsvStream` reads a CSV with :func:`pyarrow.csv.open_csv` (explicit
column types, ``block_size`` bytes per batch, single-threaded so that
malformed lines keep their line numbers) and yields record batches whose
columns are renamed to output names. A file of more than
:data:`READ_AHEAD_MIN` blocks is read :data:`READ_AHEAD` blocks ahead of
their conversion by a worker thread; lines it drops are counted from that
thread, the rows in order. Memory is bounded by ``block_size``, not by file
size.

Fast path: integer and float columns are converted by the CSV reader itself
(an empty field and pyarrow's null words, ``NA``, ``null``, ``NaN`` and the
like, are null, as in safe mode). If a block holds a value the reader
rejects (non-numeric, or an integer with a ``+``) the reader is restarted in
*safe mode*
(numeric columns read as bytes, validated with a regex, bad rows dropped
as ``not_numeric``), skipping the rows already yielded; if that fails too (a
malformed line holding bytes that are not UTF-8: pyarrow cannot hand such a line to
the invalid-row handler), once more with those bytes replaced by U+FFFD before
parsing (a transcoding codec, so only such files pay for it). Text columns are read as
bytes and decoded per dictionary value: bytes that are not UTF-8 become U+FFFD and
the row is kept, counted as the note ``not_utf8``. Lines with the wrong
field count are dropped as ``column_count`` (``truncated`` for a last line
without a trailing newline). A required column absent from the header drops
the whole file as ``missing_column``.

Assumes no newlines inside quoted fields (rocprof never writes them); such a
file still parses, but reported line numbers are then approximate.
"""

from __future__ import annotations

import bisect
import codecs
import csv
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from typing_extensions import Buffer

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from collectors.rocprof.rejects import MAX_EXAMPLES, Rejects
from exporter.prefetch import prefetch

Kind = Literal["int", "float_int", "float", "agent", "name", "str"]
"""``int``: int64; ``float_int``: decimal or exponent text -> int64 (rounded); ``float``: float64;
``agent``: ``"Agent 4"`` or ``4`` -> 4; ``name``: dictionary string;
``str``: plain string."""

DEFAULT_BLOCK = 1 << 22
READ_AHEAD = 2
"""Blocks a file's CSV reader may parse ahead of their conversion, in a worker
thread ("csv-read"): pyarrow's reader releases the GIL, so tokenizing the
next blocks overlaps converting this one (2M rocprofv3 rows: the same CPU,
8 alternating pairs, median wall 6.68 -> 6.01 s; ``benchmarks/README.md``)."""
READ_AHEAD_MIN = 2
"""Files of at most this many blocks are read in the caller's thread (a
follow-mode chunk, a small trace: a thread would cost more than it saves)."""
_INT_RX = r"^\s*[-+]?\d+\s*$"
_FLOAT_RX = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"
_DICT = pa.dictionary(pa.int32(), pa.string())
_DICT_BIN = pa.dictionary(pa.int32(), pa.binary())
_REPLACE = "aaco-utf8-replace"
"""Codec of the last-resort pass: UTF-8 with invalid bytes decoded as U+FFFD."""


class _ReplaceDecoder(codecs.BufferedIncrementalDecoder):
    def __init__(self, errors: str = "strict") -> None:
        super().__init__("replace")

    def _buffer_decode(self, data: Buffer, errors: str, final: bool) -> tuple[str, int]:
        return codecs.utf_8_decode(data, "replace", final)


def _search_codec(name: str) -> codecs.CodecInfo | None:
    if name.replace("_", "-") != _REPLACE:
        return None
    utf8 = codecs.lookup("utf-8")
    return codecs.CodecInfo(utf8.encode, lambda b, errors="strict": codecs.utf_8_decode(
        b, "replace", True), incrementaldecoder=_ReplaceDecoder, name=_REPLACE)


codecs.register(_search_codec)


def _quiet_undecodable_rows() -> None:
    """Keep pyarrow's failed hand-off of a non-UTF-8 malformed line off stderr.

    pyarrow decodes such a line's text before it calls the invalid-row
    handler; the ``UnicodeDecodeError`` cannot propagate out of its parser, so
    Python's ``sys.unraisablehook`` prints it as "Exception ignored in ...
    CsvStream._on_invalid" with a traceback. The parse then fails and the
    stream re-reads the file with those bytes replaced (mode 2 of
    :meth:`CsvStream.batches`), which counts the line with its number, so the
    traceback is noise. This wraps the current hook once (again if another
    one replaced it): exactly that error from a ``CsvStream``'s handler is
    dropped, everything else goes to the wrapped hook."""
    prev = sys.unraisablehook
    if getattr(prev, "_aaco_csvstream", False):
        return

    def hook(u: sys.UnraisableHookArgs) -> None:
        if not (isinstance(u.exc_value, UnicodeDecodeError)
                and isinstance(getattr(u.object, "__self__", None), CsvStream)):
            prev(u)

    hook._aaco_csvstream = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


@dataclass(frozen=True)
class Column:
    """Output column ``out`` read from the first present header of ``csv``."""

    out: str
    csv: tuple[str, ...]
    kind: Kind
    required: bool = False


class MissingColumn(Exception):
    """A required column is absent from the header (whole file rejected)."""


def read_header(data: bytes) -> list[str]:
    """Field names of the first line of ``data`` (csv quoting rules; ``[]`` when
    the line is not CSV, e.g. holds a bare carriage return)."""
    first = data.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace")
    try:
        return next(csv.reader([first]), [])
    except csv.Error:  # a bare CR inside the line: not a header of any rocprof format
        return []


def resolve(header: Sequence[str], columns: Sequence[Column]) -> dict[str, Column]:
    """Map csv header name -> :class:`Column` for the columns present.

    Raises :class:`MissingColumn` naming the first required column absent."""
    present: dict[str, Column] = {}
    have = set(header)
    for col in columns:
        name = next((c for c in col.csv if c in have), None)
        if name is None:
            if col.required:
                raise MissingColumn(f"required column {' or '.join(col.csv)!r} not in header")
            continue
        present[name] = col
    return present


def _agent_to_int(arr: pa.Array) -> pa.Array:
    """``"Agent 4"``/``"4"`` (dictionary or string) -> int64; others (no digits, or a
    number outside int64) -> null."""
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    vals = []
    for v in arr.dictionary.to_pylist():
        digits = "".join(ch for ch in (v or "").rsplit(" ", 1)[-1] if "0" <= ch <= "9")
        n = int(digits) if digits else None
        vals.append(n if n is not None and n < 1 << 63 else None)
    mapped = pa.array(vals, pa.int64())
    return mapped.take(arr.indices)


class CsvStream:
    """Iterate validated batches of one CSV source.

    ``name`` is the display name used in reject messages; ``line_base`` is
    added to every line number (for a chunk read from the middle of a file
    with its header prepended, ``line_base`` = file line of the chunk's first
    data line minus 2). Each yielded batch has the output columns plus
    ``_row`` (int64 global data-row index, for :meth:`line_of`).
    """

    def __init__(
        self,
        data: Path | bytes,
        columns: Sequence[Column],
        rejects: Rejects,
        *,
        name: str | None = None,
        block_size: int = DEFAULT_BLOCK,
        line_base: int = 0,
    ) -> None:
        self.data = data
        self.columns = columns
        self.rejects = rejects
        self.name = name or (str(data) if isinstance(data, Path) else "<bytes>")
        self.block_size = block_size
        self.line_base = line_base
        self._skipped: list[int] = []  # sorted physical line numbers dropped by the parser
        self._skipped_set: set[int] = set()
        self._ends_nl = True
        self._last_line = b""
        self._raw_done = 0
        self._size = 0  # bytes of the source, from _head()

    # -- line numbers -------------------------------------------------
    def line_of(self, row: int) -> int:
        """File line number (1-based, header = line 1) of data row ``row``."""
        line = row + 2
        i = 0
        while i < len(self._skipped) and self._skipped[i] <= line:
            line += 1
            i += 1
        return line + self.line_base

    def _open(self) -> pa.NativeFile:
        if isinstance(self.data, Path):
            return pa.OSFile(str(self.data), "rb")
        return pa.BufferReader(self.data)

    def _head(self) -> bytes:
        with self._open() as f:
            head = f.read(1 << 20)
            size = self._size = f.size()
            if size > 0:
                tail_at = max(0, size - (1 << 16))
                f.seek(tail_at)
                tail = bytes(f.read(size - tail_at))
                self._ends_nl = tail.endswith(b"\n")
                if not self._ends_nl:
                    self._last_line = tail.rsplit(b"\n", 1)[-1].rstrip(b"\r")
        return bytes(head)

    def _on_invalid(self, row: pcsv.InvalidRow) -> str:
        line = int(row.number) if row.number is not None else 0
        if line in self._skipped_set:
            return "skip"
        self._skipped_set.add(line)
        bisect.insort(self._skipped, line)
        last = not self._ends_nl and row.text.encode() == self._last_line
        short = row.actual_columns < row.expected_columns
        reason = "truncated" if last and short else "column_count"
        self.rejects.add(
            reason,
            self.name,
            line + self.line_base,
            f"{row.actual_columns} fields, expected {row.expected_columns}",
        )
        return "skip"

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield validated batches (output names + ``_row``); see the class doc."""
        head = self._head()
        header = read_header(head)
        try:
            present = resolve(header, self.columns)
        except MissingColumn as e:
            self.rejects.add("missing_column", self.name, 1, str(e))
            return
        done = 0
        mode = 0  # 0: typed; 1: safe; 2: safe, bytes that are not UTF-8 replaced first
        while True:
            try:
                for batch in self._read(header, present, safe=mode > 0, skip_rows=done,
                                        replace=mode == 2):
                    done = self._raw_done
                    yield batch
                return
            except pa.ArrowInvalid as e:
                if mode == 2:
                    self.rejects.add("not_numeric", self.name, None, f"unparseable block: {e}")
                    return
                # a parse error is a malformed line the handler could not take (not UTF-8)
                mode = 2 if "CSV parse error" in str(e) else mode + 1

    def _read(
        self, header: list[str], present: dict[str, Column], *, safe: bool, skip_rows: int,
        replace: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        types: dict[str, pa.DataType] = {}
        for csv_name, col in present.items():
            if col.kind in ("agent", "name"):  # text is read as bytes, checked in _convert
                types[csv_name] = _DICT_BIN
            elif col.kind == "str" or safe:
                types[csv_name] = pa.binary()
            elif col.kind == "int":
                types[csv_name] = pa.int64()
            else:
                types[csv_name] = pa.float64()
        # duplicate header names confuse include_columns; dedupe by suffix
        names = [h if header.index(h) == i else f"{h}__{i}" for i, h in enumerate(header)]
        _quiet_undecodable_rows()
        reader = pcsv.open_csv(
            self._open(),
            read_options=pcsv.ReadOptions(
                column_names=names, skip_rows=1, block_size=self.block_size, use_threads=False,
                encoding=_REPLACE if replace else "utf8",
            ),
            parse_options=pcsv.ParseOptions(invalid_row_handler=self._on_invalid),
            convert_options=pcsv.ConvertOptions(
                column_types=types,
                include_columns=list(present),
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        raws: Iterator[pa.RecordBatch] = iter(reader)
        ahead = None
        if isinstance(self.data, Path) and self._size > READ_AHEAD_MIN * self.block_size:
            raws = ahead = prefetch(raws, depth=READ_AHEAD, name="csv-read")
        row0 = 0
        try:
            for raw in raws:
                n = raw.num_rows
                start = row0
                row0 += n
                if row0 <= skip_rows:
                    continue
                if start < skip_rows:
                    raw = raw.slice(skip_rows - start)
                    start = skip_rows
                self._raw_done = row0  # data rows read so far (a restart skips them)
                yield self._convert(raw, present, start, safe)
        finally:
            if ahead is not None:  # no reader left running into a restart or after a stop
                ahead.close()

    def _convert(
        self, raw: pa.RecordBatch, present: dict[str, Column], start: int, safe: bool
    ) -> pa.RecordBatch:
        n = raw.num_rows
        rows = pa.array(np.arange(start, start + n, dtype=np.int64))
        keep: pa.Array | None = None
        out: dict[str, pa.Array] = {}
        for csv_name, col in present.items():
            arr = raw.column(csv_name)
            if col.kind in ("agent", "name", "str"):
                arr = self._utf8(arr, rows, col)
            if col.kind == "agent":
                arr = _agent_to_int(arr)
            elif col.kind in ("int", "float_int", "float") and safe:
                rx = _INT_RX if col.kind == "int" else _FLOAT_RX
                ok = pc.or_kleene(pc.is_null(arr), pc.match_substring_regex(arr, rx))
                if not pc.all(ok).as_py():
                    bad = pc.invert(ok)
                    self._report(bad, rows, "not_numeric", col, arr)
                    keep = bad if keep is None else pc.or_(keep, bad)
                    arr = pc.if_else(ok, arr, pa.scalar(None, pa.binary()))
                arr = pc.utf8_trim_whitespace(arr.cast(pa.string()))  # ASCII digits left
                if col.kind == "int":  # Arrow's integer parsers take no "+"
                    arr = pc.replace_substring_regex(arr, r"^\+", "")
                arr = pc.cast(arr, pa.int64() if col.kind == "int" else pa.float64())
            if col.kind == "float_int":
                arr = pc.cast(pc.round(arr), pa.int64())
            out[col.out] = arr
        out["_row"] = rows
        batch = pa.RecordBatch.from_pydict(out)
        if keep is not None:
            batch = batch.filter(pc.invert(keep))
        return batch

    def _utf8(self, arr: pa.Array, rows: pa.Array, col: Column) -> pa.Array:
        """Text column read as bytes -> string; bytes that are not UTF-8 become U+FFFD
        and each such row is counted as the note ``not_utf8`` (the row is kept)."""
        d = arr.dictionary if pa.types.is_dictionary(arr.type) else arr
        try:
            text = d.cast(pa.string())
        except pa.ArrowInvalid:
            vals = d.to_pylist()
            text = pa.array([None if v is None else v.decode("utf-8", "replace")
                             for v in vals], pa.string())
            bad = pa.array([v is not None and "\ufffd" in t and t.encode() != v
                            for v, t in zip(vals, text.to_pylist(), strict=True)])
            shown = text
            if pa.types.is_dictionary(arr.type):  # per row, as rows are reported
                bad = pc.fill_null(pc.take(bad, arr.indices), False)
                shown = pc.take(text, arr.indices)
            self._report(bad, rows, "not_utf8", col, shown)
        if pa.types.is_dictionary(arr.type):
            return pa.DictionaryArray.from_arrays(arr.indices, text)
        return text

    def _report(
        self, bad: pa.Array, rows: pa.Array, reason: str, col: Column, arr: pa.Array
    ) -> None:
        idx = pc.indices_nonzero(bad).to_pylist()
        for i in idx[:MAX_EXAMPLES]:
            v = arr[i].as_py()
            v = v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v
            self.rejects.add(
                reason,
                self.name,
                self.line_of(rows[i].as_py()),
                f"column {col.csv[0]!r} value {v!r}",
            )
        self.rejects.count(reason, len(idx) - min(len(idx), MAX_EXAMPLES))


def bytes_source(header_line: bytes, body: bytes) -> bytes:
    """Concatenate a header line and a body chunk (for follow mode)."""
    if not header_line.endswith(b"\n"):
        header_line += b"\n"
    return header_line + body


__all__ = ["Column", "CsvStream", "MissingColumn", "bytes_source", "read_header", "resolve"]

"""Bad input: rows are rejected with file:line and counted by reason; the rest is kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from collectors.rocprof.csvstream import CsvStream, _quiet_undecodable_rows
from collectors.rocprof.kernels import MAX_NAME_CHARS, iter_csv_kernel_spans
from collectors.rocprof.launch import launch_calls, read_api_trace
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths
from exporter.schema import KERNEL_SPAN

TD = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"
FMT = "rocprofv3_kernel_trace"


def lines() -> list[str]:
    return (TD / "kernel_trace_truncated.csv").read_text().splitlines()


def _csv(path: Path, ls: list[str]) -> Path:
    """``ls`` written to ``path`` as lines (each ended by a newline)."""
    path.write_text("\n".join(ls) + "\n")
    return path


def parse(p: Path, r: Rejects, fmt: str = FMT) -> pa.Table:
    return pa.Table.from_batches(list(iter_csv_kernel_spans(p, fmt, r)), schema=KERNEL_SPAN)


def test_file_cut_mid_line_drops_only_last_row_as_truncated(tmp_path: Path) -> None:
    data = (TD / "kernel_trace_truncated.csv").read_bytes()
    p = tmp_path / "cut_synthetic_kernel_trace.csv"
    p.write_bytes(data[: len(data) - 30])  # cut inside the 4th data row, no newline
    r = Rejects()
    t = parse(p, r)
    assert t.num_rows == 3
    assert r.counts == {"truncated": 1}
    assert r.examples["truncated"][0].startswith(f"{p}:5: truncated")


def test_non_numeric_field_rejected_with_line_rest_kept(tmp_path: Path) -> None:
    ls = lines()
    ls[2] = ls[2].replace(",1552082594709678,", ",12abc,")  # End_Timestamp of line 3
    p = _csv(tmp_path / "nonnum_synthetic_kernel_trace.csv", ls)
    r = Rejects()
    t = parse(p, r)
    assert t.num_rows == 3
    assert r.counts == {"not_numeric": 1}
    assert r.examples["not_numeric"][0] == (
        f"{p}:3: not_numeric: column 'End_Timestamp' value '12abc'"
    )


@pytest.mark.parametrize("value", ["NA", "null", "NaN", "N/A", ""])
def test_null_words_in_an_integer_column_are_null_and_the_row_kept(
        tmp_path: Path, value: str) -> None:
    """The CSV reader converts integers itself; an empty field and pyarrow's
    null words read as null, as they did when integers were read as bytes and
    cast (and as safe mode reads them): the row is kept, nothing rejected."""
    ls = lines()
    tid = ls[2].split(",")[4]  # Thread_Id of line 3
    ls[2] = ls[2].replace(f",{tid},", f",{value},", 1)
    p = _csv(tmp_path / "nullword_synthetic_kernel_trace.csv", ls)
    r = Rejects()
    t = parse(p, r)
    assert r.counts == {}
    assert t.num_rows == 4
    assert t.column("tid").to_pylist()[1] is None
    assert t.column("tid").null_count == 1


def test_integers_with_spaces_or_a_plus_sign_are_read_as_their_values(tmp_path: Path) -> None:
    """An integer field with spaces around it (which the fast path's reader
    trims) or a leading ``+`` (which it rejects: read in safe mode) is read
    as its value, and every row is kept: the "+" once made safe mode give up
    on the rest of the file."""
    ls = lines()[:4]
    ref = _csv(tmp_path / "ref_synthetic_kernel_trace.csv", ls)
    ls[2] = ls[2].replace(",1552082594709678,", ", 1552082594709678 ,")  # End_Timestamp
    ls[3] = ls[3].replace(",855217,", ",+855217,")  # Thread_Id
    p = _csv(tmp_path / "signed_synthetic_kernel_trace.csv", ls)
    r = Rejects()
    t = parse(p, r)
    assert r.counts == {}
    assert t.num_rows == 3
    assert t.equals(parse(ref, Rejects()))


def test_end_before_start_and_duplicate_dispatch_id(tmp_path: Path) -> None:
    ls = lines()
    f = ls[1].split(",")
    f[9], f[10] = f[10], f[9]  # swap start/end of line 2
    ls[1] = ",".join(f)
    ls.append(ls[4])  # line 6 repeats dispatch id of line 5
    p = _csv(tmp_path / "order_synthetic_kernel_trace.csv", ls)
    r = Rejects()
    t = parse(p, r)
    assert t.num_rows == 3
    assert r.counts == {"end_before_start": 1, "duplicate_id": 1}
    assert r.examples["end_before_start"][0].startswith(f"{p}:2:")
    assert r.examples["duplicate_id"][0].startswith(f"{p}:6:")


def test_wrong_field_count_in_middle_is_column_count(tmp_path: Path) -> None:
    ls = lines()
    ls.insert(2, '"KERNEL_DISPATCH","Agent 4",1')
    p = _csv(tmp_path / "short_synthetic_kernel_trace.csv", ls)
    r = Rejects()
    t = parse(p, r)
    assert t.num_rows == 4
    assert r.counts == {"column_count": 1}
    assert r.examples["column_count"][0].startswith(f"{p}:3:")


@pytest.mark.parametrize("copies, ahead", [(1, False), (40, True)])
def test_non_utf8_short_line_is_counted_without_a_traceback_on_stderr(
        tmp_path: Path, copies: int, ahead: bool) -> None:
    """A malformed line holding bytes that are not UTF-8: pyarrow cannot hand
    it to the invalid-row handler and Python would print "Exception ignored
    ... UnicodeDecodeError" with a traceback. In a fresh interpreter (the
    default unraisable hook, as a user's replay has) stderr stays empty, the
    line is one column_count reject with its line number, the rest is kept:
    read in the caller's thread (the real file's 4 rows) and read ahead by
    the "csv-read" thread (its rows 40 times over, dispatch ids renumbered,
    1 KiB blocks)."""
    head, *rows = (TD / "kernel_trace_truncated.csv").read_bytes().splitlines()
    ls = [head]
    for i, row in enumerate(rows * copies):
        f = row.split(b",")
        f[5] = str(i + 1).encode()  # Dispatch_Id: unique, as rocprofv3 writes it
        ls.append(b",".join(f))
    ls.insert(2, b'"KERNEL_DISPATCH",\xfa\xfb,1')
    p = tmp_path / f"latin1_short_x{copies}_synthetic_kernel_trace.csv"
    p.write_bytes(b"\n".join(ls) + b"\n")
    code = ("import sys, threading; from pathlib import Path\n"
            "from collectors.rocprof.kernels import iter_csv_kernel_spans\n"
            "from collectors.rocprof.rejects import Rejects\n"
            "r = Rejects(); n = 0; ahead = False\n"
            f"for b in iter_csv_kernel_spans(Path(sys.argv[1]), {FMT!r}, r, block_size=1024):\n"
            "    n += b.num_rows\n"
            "    ahead = ahead or any(t.name == 'csv-read' for t in threading.enumerate())\n"
            "print(n, ahead, r.counts, r.examples['column_count'][0])\n")
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True,
                         check=True, cwd=TD.parents[2], timeout=120)
    assert out.stderr == ""
    assert out.stdout.startswith(f"{4 * copies} {ahead} {{'column_count': 1}} ")
    assert f"{p}:3: column_count" in out.stdout


def test_the_quiet_hook_passes_every_other_unraisable_exception_on() -> None:
    """Only a UnicodeDecodeError raised for a CsvStream's handler is dropped:
    the same error from another object, and another error from the handler,
    reach the hook that was installed before."""
    seen: list[Any] = []
    before = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        _quiet_undecodable_rows()
        _quiet_undecodable_rows()  # idempotent: one wrapper, not two
        stream = CsvStream(b"a\n1\n", [], Rejects())
        bad = UnicodeDecodeError("utf-8", b"\xfa", 0, 1, "invalid start byte")

        def raise_unraisable(exc: BaseException, obj: object) -> None:
            sys.unraisablehook(SimpleNamespace(  # what Python passes: sys.UnraisableHookArgs
                exc_type=type(exc), exc_value=exc, exc_traceback=None, err_msg=None,
                object=obj))

        raise_unraisable(bad, stream._on_invalid)
        raise_unraisable(bad, print)
        raise_unraisable(ValueError("x"), stream._on_invalid)
        assert [(type(u.exc_value), u.object) for u in seen] == [
            (UnicodeDecodeError, print), (ValueError, stream._on_invalid)]
    finally:
        sys.unraisablehook = before


def test_renamed_required_column_rejects_file_naming_column(tmp_path: Path) -> None:
    ls = lines()
    ls[0] = ls[0].replace('"End_Timestamp"', '"EndTime"')
    p = _csv(tmp_path / "renamed_synthetic_kernel_trace.csv", ls)
    r = Rejects()
    assert parse(p, r).num_rows == 0
    assert r.counts == {"missing_column": 1}
    assert "End_Timestamp" in r.examples["missing_column"][0]


def test_100kb_kernel_name_is_truncated_and_counted(tmp_path: Path) -> None:
    ls = lines()
    ls[1] = ls[1].replace('"addition_kernel"', '"' + "k" * 100_000 + '"')
    p = _csv(tmp_path / "longname_synthetic_kernel_trace.csv", ls)
    r = Rejects()
    t = parse(p, r)
    assert t.num_rows == 4
    assert len(t["kernel_name"].to_pylist()[0]) == MAX_NAME_CHARS
    assert r.notes == {"name_truncated": 1} and r.total == 0


def test_wrong_file_for_parser_reports_missing_column() -> None:
    r = Rejects()
    t = parse(TD / "api" / "hip_trace.csv", r)  # an API trace given to the kernel parser
    assert t.num_rows == 0 and r.counts == {"missing_column": 1}


def test_duplicate_launch_correlation_ids_keep_first(tmp_path: Path) -> None:
    src = (TD / "api" / "hip_runtime_trace.csv").read_text().splitlines()
    launch = next(x for x in src if "hipLaunchKernel" in x)
    p = _csv(tmp_path / "dup_synthetic_hip_api_trace.csv", [*src, launch])
    r = Rejects()
    calls = launch_calls(read_api_trace(p, r), r, str(p))
    assert calls["correlation_id"].to_pylist() == [5]
    assert r.counts == {"duplicate_id": 1}


def test_replay_counts_unknown_and_bad_json_files_and_continues(tmp_path: Path) -> None:
    (tmp_path / "notes_synthetic.csv").write_text("x,y\n1,2\n")
    (tmp_path / "broken_synthetic.json").write_text('{"traceEvents": [')
    (tmp_path / "kernel_trace.csv").write_bytes((TD / "kernel_trace.csv").read_bytes())
    r = Rejects()
    got = sum(e.batch.num_rows for e in load_paths([tmp_path], r))
    assert got == 9
    assert r.counts == {"unknown_format": 1, "bad_json": 1}

"""Inputs the parser fuzzer found (benchmarks/fuzz_parsers.py) in the rocprofv3 CSV
readers: a kernel trace beside an API or marker trace without rows or without an
optional column, and agent ids too large for int64 or in non-ASCII digits, used to
raise ArrowTypeError/KeyError/OverflowError/ValueError out of ``load_paths``."""

from __future__ import annotations

import shutil
from pathlib import Path

from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths

TD = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"


def _run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(TD / "kernel_trace.csv", d / "kernel_trace.csv")
    shutil.copy(TD / "api" / "hip_runtime_trace.csv", d / "hip_runtime_trace.csv")
    shutil.copy(TD / "roctx_synthetic" / "marker_api_trace.csv", d / "marker_api_trace.csv")
    return d


def _kernels(d: Path) -> tuple[int, Rejects]:
    r = Rejects()
    rows = sum(e.batch.num_rows for e in load_paths([d], r) if e.signal == "kernel_span")
    return rows, r


def test_api_trace_with_header_only_joins_nothing(tmp_path: Path) -> None:
    """A HIP API trace with its header but no rows (an empty, int64-typed table made
    launch_calls' is_in fail with ArrowTypeError): the kernels are kept, unjoined."""
    d = _run_dir(tmp_path)
    base, base_r = _kernels(d)
    header = (d / "hip_runtime_trace.csv").read_text().splitlines()[0]
    (d / "hip_runtime_trace.csv").write_text(header + "\n")
    rows, r = _kernels(d)
    assert rows == base
    assert r.counts == base_r.counts


def test_marker_trace_without_the_optional_pid_column_still_reads(tmp_path: Path) -> None:
    """A marker trace whose header lacks Process_Id (KeyError 'Field "pid" does not exist'):
    its regions are read with a null pid."""
    d = _run_dir(tmp_path)
    base, _ = _kernels(d)
    lines = (d / "marker_api_trace.csv").read_text().splitlines()
    col = lines[0].split(",").index('"Process_Id"')
    (d / "marker_api_trace.csv").write_text(
        "\n".join(",".join(f for i, f in enumerate(ln.split(",")) if i != col)
                  for ln in lines) + "\n")
    rows, r = _kernels(d)
    assert rows == base
    assert "missing_column" not in r.counts


def test_agent_id_outside_int64_or_in_other_digits_is_null(tmp_path: Path) -> None:
    """'Agent 99999999999999999999' (OverflowError) and 'Agent ²' (int() ValueError on a
    str.isdigit() character): the agent id is null, the kernel is kept."""
    d = _run_dir(tmp_path)
    base, _ = _kernels(d)
    text = (d / "kernel_trace.csv").read_text()
    lines = text.splitlines()
    assert '"Agent 4"' in lines[1] and '"Agent 4"' in lines[2]
    lines[1] = lines[1].replace('"Agent 4"', '"Agent 99999999999999999999"', 1)
    lines[2] = lines[2].replace('"Agent 4"', '"Agent ²"', 1)
    (d / "kernel_trace.csv").write_text("\n".join(lines) + "\n")
    r = Rejects()
    spans = [e.batch for e in load_paths([d], r) if e.signal == "kernel_span"]
    assert sum(b.num_rows for b in spans) == base
    assert sum(b.column("agent_id").null_count for b in spans) == 2


def test_kernel_name_that_is_not_utf8_is_kept_and_noted(tmp_path: Path) -> None:
    """A byte 0xff inside one kernel name made the CSV reader's string conversion fail,
    and the whole file was dropped as one 'not_numeric: unparseable block'. Now the name
    is decoded with U+FFFD, the row kept and counted as the note not_utf8 with its line."""
    d = _run_dir(tmp_path)
    base, base_r = _kernels(d)
    lines = (d / "kernel_trace.csv").read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"divide_kernel", b"divide_\xff_kernel")
    (d / "kernel_trace.csv").write_bytes(b"\n".join(lines))
    r = Rejects()
    spans = [e.batch for e in load_paths([d / "kernel_trace.csv"], r)
             if e.signal == "kernel_span"]
    assert sum(b.num_rows for b in spans) == base
    assert r.counts == base_r.counts
    assert r.notes == {**base_r.notes, "not_utf8": 1}  # base: the samples' launch_mismatch
    assert r.examples["not_utf8"][0].startswith(f"{d / 'kernel_trace.csv'}:3: not_utf8:")
    names = [n for b in spans for n in b.column("kernel_name").to_pylist()]
    assert "divide_\ufffd_kernel(float*, float const*, float const*, int, int)" in names


def test_numeric_field_that_is_not_utf8_drops_only_its_row(tmp_path: Path) -> None:
    """End_Timestamp '12\\xfe' (safe mode read numbers as strings: the conversion failed
    and the rest of the file was lost): only that row is dropped, as not_numeric."""
    d = _run_dir(tmp_path)
    base, base_r = _kernels(d)
    lines = (d / "kernel_trace.csv").read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b",1550151853064037,", b",12\xfe,", 1)
    assert b"12\xfe" in lines[3]
    (d / "kernel_trace.csv").write_bytes(b"\n".join(lines))
    r = Rejects()
    rows = sum(e.batch.num_rows for e in load_paths([d / "kernel_trace.csv"], r)
               if e.signal == "kernel_span")
    assert rows == base - 1
    assert r.counts == {**base_r.counts, "not_numeric": 1}
    assert r.examples["not_numeric"][0].startswith(f"{d / 'kernel_trace.csv'}:4: not_numeric:")


def test_malformed_line_that_is_not_utf8_drops_only_that_line(tmp_path: Path) -> None:
    """A line with one field too many ending in b'\\xff\\xfe': pyarrow could not hand it to
    the invalid-row handler (UnicodeDecodeError inside pyarrow), the reader failed and
    the whole file was lost as 'not_numeric: unparseable block'. Now that line alone is
    dropped as column_count with its line number; the other rows are kept."""
    d = _run_dir(tmp_path)
    base, base_r = _kernels(d)
    lines = (d / "kernel_trace.csv").read_bytes().split(b"\n")
    lines[2] += b",\xff\xfe"
    (d / "kernel_trace.csv").write_bytes(b"\n".join(lines))
    r = Rejects()
    rows = sum(e.batch.num_rows for e in load_paths([d / "kernel_trace.csv"], r)
               if e.signal == "kernel_span")
    assert rows == base - 1
    assert r.counts == {**base_r.counts, "column_count": 1}
    assert r.examples["column_count"][0].startswith(f"{d / 'kernel_trace.csv'}:3: column_count")

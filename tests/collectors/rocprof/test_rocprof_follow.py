"""Live directory follow, the registered collector, and capture under the rocprofv3 test double."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collectors.base import CollectorContext, create
from collectors.rocprof.follow import DirFollower
from collectors.rocprof.runner import find_outputs, rocprofv3_command

TD = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"
DOUBLE = Path(__file__).resolve().parent / "bin" / "rocprofv3"


def test_follow_picks_up_appended_rows_and_waits_for_partial_line(tmp_path: Path) -> None:
    src = (TD / "kernel_trace.csv").read_bytes().splitlines(keepends=True)
    run = tmp_path / "host" / "1234"
    run.mkdir(parents=True)
    k = run / "x_kernel_trace.csv"
    k.write_bytes(b"".join(src[:3]) + src[3][:20])  # header + 2 rows + partial row
    f = DirFollower(tmp_path)
    first = f.poll()
    assert [e.batch.num_rows for e in first] == [2]
    assert first[0].key == f"rocprof:{k}:{len(src[0])}:0"
    assert first[0].batch.column("pid").to_pylist() == [1234, 1234]
    assert f.poll() == []  # nothing complete yet
    with k.open("ab") as fh:
        fh.write(src[3][20:] + b"".join(src[4:]))
    second = f.poll()
    assert sum(e.batch.num_rows for e in second) == 7  # the completed row + 6 more
    assert f.rejects.total == 0


def test_follow_joins_hip_api_rows_of_same_run(tmp_path: Path) -> None:
    api = (TD / "api" / "hip_runtime_trace.csv").read_text()
    (tmp_path / "r_hip_api_trace.csv").write_text(api)
    # a kernel with Correlation_Id 5 = the hipLaunchKernel row (end 1191916548408842)
    hdr = (TD / "kernel_trace.csv").read_text().splitlines()[0]
    row = '"KERNEL_DISPATCH","Agent 4",1,1,238,1,10,"k(int)",5,1191916548410842,1191916548420842'
    row += ",0,0,8,0,16,64,1,1,1024,1,1"
    (tmp_path / "r_kernel_trace.csv").write_text(hdr + "\n" + row + "\n")
    out = DirFollower(tmp_path).poll()
    rec = out[0].batch.to_pylist()[0]
    # api 1191916548408842 - 1191916547842972 = 565870; delay 1191916548410842 - ...408842 = 2000
    assert (rec["launch_api_ns"], rec["launch_delay_ns"]) == (565870, 2000)


def test_registered_rocprof_collector_emits_kernel_spans(tmp_path: Path) -> None:
    (tmp_path / "kernel_trace.csv").write_bytes((TD / "kernel_trace.csv").read_bytes())
    c = create("rocprof", CollectorContext(options={"dir": str(tmp_path), "interval_s": 0.5}))
    assert (c.name, c.interval_s) == ("rocprof", 0.5)
    emits = list(c.collect())
    assert [e.signal for e in emits] == ["kernel_span"] and emits[0].batch.num_rows == 9
    assert list(c.collect()) == []


@pytest.mark.parametrize(("fmt", "written"), [("rocpd", "aaco_results.db"),
                                              ("csv", "aaco_kernel_trace.csv")])
def test_capture_under_rocprofv3_test_double_writes_layout_found_by_find_outputs(
    tmp_path: Path, fmt: str, written: str,
) -> None:
    """rocpd (requested by default) and CSV output are both found."""
    argv = rocprofv3_command(tmp_path, [sys.executable, "-c", "raise SystemExit(3)"],
                             rocprofv3=str(DOUBLE), output_format=fmt)
    proc = subprocess.run(argv, check=False)
    assert proc.returncode == 3  # the command's exit status is passed through
    outs = find_outputs(tmp_path)
    assert len(outs) == 1 and outs[0].name == written
    assert outs[0].parent.name.isdigit()  # <dir>/<host>/<pid>/

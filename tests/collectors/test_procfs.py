"""``collectors.procfs.read_small`` returns whole files, small or larger than
one read, and raises as ``open`` does for a missing one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collectors.procfs import CHUNK, read_small


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7])
def test_read_small_returns_the_whole_file(tmp_path: Path, size: int) -> None:
    """Every byte, in order, at chunk-boundary sizes (synthetic file)."""
    f = tmp_path / "synthetic.bin"
    data = os.urandom(size)
    f.write_bytes(data)
    assert read_small(str(f)) == data


def test_read_small_reads_proc_files_like_open() -> None:
    """This process's comm and cmdline (files that do not change while it
    runs): the same bytes as a plain read."""
    for name in ("comm", "cmdline"):
        path = f"/proc/{os.getpid()}/{name}"
        assert read_small(path) == Path(path).read_bytes()


def test_read_small_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_small(str(tmp_path / "gone"))

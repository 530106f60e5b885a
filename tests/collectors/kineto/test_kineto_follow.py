"""The kineto collector's completeness rule on the real MI250 trace.

Time is controlled, never slept: the follower's clock is a fake, file mtimes
are set with ``os.utime``."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import pytest

from collectors.base import CollectorContext, create
from collectors.kineto.follow import TraceDirFollower
from collectors.rocprof.rejects import Rejects

FIXTURE = (Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"
           / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
GZ = FIXTURE.read_bytes()
PLAIN = gzip.decompress(GZ)
KERNELS, STEPS = 14, 2  # hand counts, see test_kineto_steps.py
T0 = 1_800_000_000.0  # the fake "now", seconds


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _follower(root: Path, clock: Clock, settle_s: float = 2.0,
              rejects: Rejects | None = None) -> tuple[TraceDirFollower, list[str]]:
    logs: list[str] = []
    f = TraceDirFollower(root, rejects if rejects is not None else Rejects(), settle_s=settle_s,
                         clock=clock, window=lambda: (0, 1), log=logs.append)
    return f, logs


def _write(path: Path, data: bytes, mtime: float) -> None:
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


def _counts(emits: list) -> dict[str, int]:  # type: ignore[type-arg]
    out: dict[str, int] = {}
    for e in emits:
        out[e.signal] = out.get(e.signal, 0) + e.batch.num_rows
    return out


@pytest.mark.parametrize("name,data", [("rank0.1.pt.trace.json.gz", GZ),
                                       ("rank0.1.pt.trace.json", PLAIN)])
def test_settled_file_is_parsed_exactly_once(tmp_path: Path, name: str, data: bytes) -> None:
    """gz and plain JSON: a complete file is parsed on the first poll that finds
    it unchanged since the previous one and older than settle_s; later polls
    emit nothing."""
    clock = Clock()
    f, logs = _follower(tmp_path, clock)
    _write(tmp_path / name, data, T0 - 10)
    assert f.poll() == []  # first sight: nothing to compare with
    got = f.poll()
    assert _counts(got) == {"kernel_span": KERNELS, "iteration_span": STEPS}
    assert f.poll() == [] and f.poll() == []
    assert f.parsed == 1 and f.rejects.total == 0
    assert {e.batch.column("model")[0].as_py() for e in got} == {"rank0"}
    assert len(logs) == 1 and name in logs[0]


def test_file_being_written_is_not_parsed_until_complete_and_settled(tmp_path: Path) -> None:
    """A truncated copy (first half of the bytes) that is still young, and then
    growing, is never parsed nor rejected; once whole, unchanged for a poll
    and settle_s old, it is parsed once."""
    clock = Clock()
    f, _ = _follower(tmp_path, clock, settle_s=2.0)
    p = tmp_path / "w.1.pt.trace.json"
    _write(p, PLAIN[: len(PLAIN) // 2], T0)
    assert f.poll() == [] and f.poll() == []  # unchanged but young
    clock.now += 1.0
    _write(p, PLAIN[: len(PLAIN) - 10], clock.now)  # grew
    assert f.poll() == []
    _write(p, PLAIN, clock.now)  # finished writing
    assert f.poll() == []  # changed since the previous poll
    assert f.poll() == []  # unchanged, but only 0 s old
    clock.now += 2.0
    assert _counts(f.poll()) == {"kernel_span": KERNELS, "iteration_span": STEPS}
    assert f.poll() == []
    assert f.parsed == 1 and f.rejects.total == 0


def test_rename_into_place_is_parsed_and_temp_name_ignored(tmp_path: Path) -> None:
    """A trace written under a temp name (not *.json) and renamed is parsed
    once, with settle_s=0."""
    clock = Clock()
    f, _ = _follower(tmp_path, clock, settle_s=0)
    tmp = tmp_path / "sub" / "t.json.gz.tmp"
    tmp.parent.mkdir()
    _write(tmp, GZ, T0 - 1)
    assert f.poll() == [] and f.poll() == []
    tmp.rename(tmp_path / "sub" / "t.1.pt.trace.json.gz")
    assert f.poll() == []
    assert _counts(f.poll()) == {"kernel_span": KERNELS, "iteration_span": STEPS}
    assert f.poll() == []


def test_corrupt_settled_file_is_rejected_once_and_counted(tmp_path: Path) -> None:
    """A settled file that does not parse (truncated gzip; plain text) is
    rejected once each: bad_json counted per file, one log line naming it,
    never re-read while unchanged."""
    clock = Clock()
    f, logs = _follower(tmp_path, clock, settle_s=0)
    _write(tmp_path / "cut.json.gz", GZ[: len(GZ) // 2], T0 - 5)
    _write(tmp_path / "junk.json", b"{not json", T0 - 5)
    for _ in range(5):
        assert f.poll() == []
    assert f.rejects.counts == {"bad_json": 2}
    assert len(logs) == 2
    assert any("cut.json.gz" in m for m in logs) and any("junk.json" in m for m in logs)
    assert all("rejected" in m for m in logs)


def test_rewritten_file_is_parsed_again_with_new_keys(tmp_path: Path) -> None:
    """A handled file that changes (size/mtime) is a new trace: parsed once more,
    under keys naming the new size and mtime; the same version keeps its keys."""
    clock = Clock()
    f, _ = _follower(tmp_path, clock, settle_s=0)
    p = tmp_path / "r.json"
    _write(p, PLAIN, T0 - 5)
    f.poll()
    first = [e.key for e in f.poll()]
    _write(p, PLAIN + b"\n", T0 - 4)
    f.poll()
    second = [e.key for e in f.poll()]
    assert len(first) == len(second) == 2 and not set(first) & set(second)
    mtime_ns = p.stat().st_mtime_ns
    assert second[0] == f"kineto:{p}:{len(PLAIN) + 1}:{mtime_ns}:0"


def test_memory_of_seen_files_is_bounded(tmp_path: Path) -> None:
    """With max_files=2 and 4 handled files, only 2 are remembered; the
    forgotten ones are below the mtime floor and are not parsed again."""
    clock = Clock()
    f, _ = _follower(tmp_path, clock, settle_s=0)
    f.max_files = 2
    for i in range(4):
        _write(tmp_path / f"m{i}.json", PLAIN, T0 - 10 + i)
    f.poll()
    assert _counts(f.poll()) == {"kernel_span": 4 * KERNELS, "iteration_span": 4 * STEPS}
    assert len(f.done) == 2 and f.parsed == 4
    assert f.poll() == [] and f.parsed == 4
    (tmp_path / "m3.json").unlink()
    f.poll()
    assert len(f.done) == 1  # vanished files are forgotten


def test_collector_plugin_options_and_drops(tmp_path: Path) -> None:
    """`kineto` is a registered plugin: options dir/interval_s/settle_s/model,
    drops() reports bad files by reason; a missing dir option is an error."""
    c = create("kineto", CollectorContext(options={"dir": str(tmp_path), "interval_s": 0.5,
                                                   "settle_s": 0, "model": "llama"},
                                          log=lambda m: None))
    assert (c.name, c.source, c.interval_s) == ("kineto", "kineto", 0.5)
    past = time.time() - 5  # the plugin uses the real clock
    _write(tmp_path / "a.json", PLAIN, past)
    _write(tmp_path / "b.json", b"[", past)
    list(c.collect())
    got = list(c.collect())
    assert {e.batch.column("model")[0].as_py() for e in got} == {"llama"}
    assert c.drops() == {"bad_json": 1}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="'dir'"):
        create("kineto", CollectorContext(options={}))

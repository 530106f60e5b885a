"""Session bundles are written in ``.<name>.partial`` and renamed when complete:
a full disk gives exit status 2, one message naming the bundle, and nothing
half-written; a normal run leaves no partial directory."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.bundle_dir import BundleDir, BundleWriteError, partial_path

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = ROOT / "collectors/rocprof/testdata"
INPUTS = [str(TESTDATA / "finite_difference_results.csv"),
          str(TESTDATA / "seismic_stencils_results.csv")]  # a ~440 KiB replay bundle
EXE = str(Path(sys.executable).parent / "aaco-exporter")


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=240,
                          check=False)


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 128 KiB tmpfs (needs root; fails, not skips, without it)."""
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs and needs root (CI runs as root)")
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.root
def test_replay_into_a_full_disk_exits_2_and_leaves_nothing(
        tiny_tmpfs: Path, cli_env: dict[str, str]) -> None:
    """The bundle does not fit: exit 2, one error line naming the bundle path
    and the cause, no bundle and no partial directory left on the disk."""
    r = _run(["replay", *INPUTS, "--out", str(tiny_tmpfs)], cli_env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("aaco-exporter: error:")]
    assert len(errors) == 1, r.stderr
    assert f"cannot write session bundle {tiny_tmpfs}/" in errors[0]
    assert "_replay: No space left on device" in errors[0]
    assert "Traceback" not in r.stderr
    assert list(tiny_tmpfs.iterdir()) == []


@pytest.mark.root
def test_command_capture_into_a_full_disk_exits_2_and_leaves_nothing(
        tiny_tmpfs: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """capture -- CMD whose bundle does not fit (the disk is filled first, as
    by another writer): exit 2, one message, nothing left but the filler."""
    filler = tiny_tmpfs / "filler"
    with filler.open("wb") as f, pytest.raises(OSError):
        f.write(b"\0" * (1 << 20))  # fill the disk
    r = _run(["capture", "--out", str(tiny_tmpfs), "--rocprofv3", str(tmp_path / "none"),
              "--", "true"], cli_env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("aaco-exporter: error:")]
    assert len(errors) == 1 and f"cannot write session bundle {tiny_tmpfs}/" in errors[0]
    assert [p.name for p in tiny_tmpfs.iterdir()] == ["filler"]


def test_normal_replay_leaves_no_partial_and_prints_the_final_path(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """The last stdout line is the final bundle; no ``.partial`` sibling remains."""
    r = _run(["replay", INPUTS[1], "--out", str(tmp_path)], cli_env)
    assert r.returncode == 0, r.stderr
    session = Path(r.stdout.strip().splitlines()[-1])
    assert session.parent == tmp_path and session.name.endswith("_replay")
    assert (session / "session.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [session.name]


def test_bundle_dir_renames_on_success(tmp_path: Path) -> None:
    """Written in the partial sibling, renamed to the final path at the end."""
    final = tmp_path / "b" / "s1"
    with BundleDir() as b:
        out = b.create(final)
        assert out == partial_path(final) == tmp_path / "b" / ".s1.partial"
        (out / "x.json").write_text("{}")
        assert not final.exists()
    assert (final / "x.json").is_file() and not out.exists()


def test_bundle_dir_removes_partial_and_names_path_on_write_error(tmp_path: Path) -> None:
    """An OSError about the bundle (ENOSPC) becomes BundleWriteError naming the
    final path; the partial directory is gone."""
    final = tmp_path / "s2"
    with pytest.raises(BundleWriteError, match=f"cannot write session bundle {final}: "
                                               "No space left on device"), BundleDir() as b:
        out = b.create(final)
        (out / "half.parquet").write_bytes(b"PAR1")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_bundle_dir_passes_other_errors_unchanged(tmp_path: Path) -> None:
    """Unrelated exceptions propagate as they are, after the cleanup."""
    with pytest.raises(FileNotFoundError, match="no-such-command"), BundleDir() as b:
        b.create(tmp_path / "s3")
        raise FileNotFoundError(errno.ENOENT, "not found", "no-such-command")
    with pytest.raises(KeyboardInterrupt), BundleDir() as b:
        b.create(tmp_path / "s4")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_bundle_dir_refuses_an_existing_bundle(tmp_path: Path) -> None:
    """A final path that exists is never overwritten."""
    (tmp_path / "s5").mkdir()
    with pytest.raises(BundleWriteError, match="s5"), BundleDir() as b:
        b.create(tmp_path / "s5")

"""Named baselines (exporter.baselines) and `diff --baseline NAME SESSION`,
through the console script, on replay bundles of a real rocprofv3 trace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from exporter.baselines import BaselineError, checksum, resolve, save, store_dir
from tests.exporter.replayed import SEISMIC, V3_KERNELS, replay, run_cli


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two replays of the real rocprofv3 kernel trace."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    d = tmp_path_factory.mktemp("bl")
    return replay([V3_KERNELS], d / "a", env), replay([V3_KERNELS], d / "b", env)


def test_store_dir_flag_then_env_then_xdg_default() -> None:
    """--baseline-dir > $AACO_BASELINE_DIR > $XDG_DATA_HOME/... > ~/.local/share/..."""
    assert store_dir("/x", {"AACO_BASELINE_DIR": "/y"}) == Path("/x")
    assert store_dir(None, {"AACO_BASELINE_DIR": "/y", "XDG_DATA_HOME": "/z"}) == Path("/y")
    assert store_dir(None, {"XDG_DATA_HOME": "/z"}) == Path("/z/aaco-exporter/baselines")
    assert store_dir(None, {}) == Path.home() / ".local/share/aaco-exporter/baselines"


@pytest.mark.slow
def test_save_list_show_and_diff_by_name_write_baseline_ref(
        bundles: tuple[Path, Path], tmp_path: Path) -> None:
    """save copies the bundle (regress/ left out) with a sha256 manifest; list
    and show print it; diff --baseline NAME SESSION judges SESSION against the
    stored copy and writes regress/baseline_ref.json naming it, with the
    checksums of the compared files and the verdict."""
    a, b = bundles
    (a / "regress").mkdir(exist_ok=True)
    (a / "regress/verdict.json").write_text("{}")  # an earlier diff's output: not copied
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    env.pop("AACO_BASELINE_DIR", None)
    r = run_cli(["baseline", "save", "v3-ref", str(a)], env)
    assert r.returncode == 0, r.stderr
    stored = tmp_path / "xdg/aaco-exporter/baselines/v3-ref"
    assert Path(r.stdout.strip()) == stored
    assert (stored / "bundle/profiler/kernels.parquet").is_file()
    assert not (stored / "bundle/regress").exists()
    sid = json.loads((a / "session.json").read_text())["session_id"]
    r = run_cli(["baseline", "list"], env)
    assert r.returncode == 0 and r.stdout.split("\t")[:3] == ["v3-ref", sid, "replay"]
    shown = json.loads(run_cli(["baseline", "show", "v3-ref"], env).stdout)
    assert shown["manifest"]["profiler/kernels.parquet"] == checksum(
        a, ["profiler/kernels.parquet"])["files"]["profiler/kernels.parquet"]
    r = run_cli(["diff", "--baseline", "v3-ref", str(b)], env)
    assert r.returncode == 0, r.stderr
    ref = json.loads((b / "regress/baseline_ref.json").read_text())
    assert ref["baseline"]["name"] == "v3-ref" and ref["baseline"]["session_id"] == sid
    assert ref["baseline"]["path"] == str(stored / "bundle")
    assert ref["mode"] == "kernels" and ref["verdict"]["regression"] is False
    # same trace replayed: the compared kernel table is byte-identical
    assert ref["baseline"]["compared"]["files"]["profiler/kernels.parquet"] == \
        ref["session"]["compared"]["files"]["profiler/kernels.parquet"]
    assert ref["verdict"] == json.loads((b / "regress/verdict.json").read_text())
    # saving the name again is refused without --force, accepted with it
    assert run_cli(["baseline", "save", "v3-ref", str(b)], env).returncode == 2
    r = run_cli(["baseline", "save", "v3-ref", str(b), "--force"], env)
    assert r.returncode == 0, r.stderr
    assert json.loads((stored / "baseline.json").read_text())["source"] == str(b.resolve())


@pytest.mark.slow
def test_a_changed_stored_baseline_is_refused_naming_the_file(
        bundles: tuple[Path, Path], tmp_path: Path) -> None:
    """A stored kernels.parquet that no longer matches its manifest: exit 2,
    the message names the file; no verdict is written."""
    a, _ = bundles
    store = tmp_path / "store"
    b = save("tamper", a, store)
    s = replay([SEISMIC], tmp_path / "s", {**os.environ})
    (b.bundle / "profiler/kernels.parquet").write_bytes(
        (s / "profiler/kernels.parquet").read_bytes())
    r = run_cli(["diff", "--baseline", "tamper", "--session", str(s),
                 "--baseline-dir", str(store)], {**os.environ})
    assert r.returncode == 2
    assert "kernels.parquet changed since it was saved" in r.stderr
    assert not (s / "regress").exists()


def test_bad_and_unknown_names_are_errors(tmp_path: Path) -> None:
    """Names outside [A-Za-z0-9._-] and unknown names raise BaselineError
    naming the store; a directory path still works as --baseline."""
    with pytest.raises(BaselineError, match="baseline name"):
        save("../x", tmp_path, tmp_path / "store")
    with pytest.raises(BaselineError, match="not a session bundle"):
        save("ok", tmp_path, tmp_path / "store")
    with pytest.raises(BaselineError, match="no baseline named 'nope'"):
        resolve("nope", tmp_path / "store")
    assert resolve(str(tmp_path), tmp_path / "store") == (tmp_path, None)


@pytest.mark.slow
def test_magika_capture_judged_against_itself_by_name_in_latency_mode(tmp_path: Path) -> None:
    """A real `capture --model magika` saved as a baseline and judged against
    by name: latency mode, 0% delta, no regression; baseline_ref.json names
    the baseline and both sides' compared files (iterations, derived metrics,
    kernels) have the same sha256."""
    env = {**os.environ, "AACO_BASELINE_DIR": str(tmp_path / "store")}
    r = run_cli(["capture", "--model", "magika", "--iterations", "20", "--warmup", "2",
                 "--out", str(tmp_path), "--quiet"], env, timeout=400)
    assert r.returncode == 0, r.stderr
    s = Path(r.stdout.strip().splitlines()[-1])
    assert run_cli(["baseline", "save", "magika", str(s)], env).returncode == 0
    r = run_cli(["diff", "--baseline", "magika", "--session", str(s)], env)
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["mode"] == "latency" and v["latency_delta_pct"] == 0.0 and not v["regression"]
    ref = json.loads((s / "regress/baseline_ref.json").read_text())
    assert ref["baseline"]["name"] == "magika" and ref["mode"] == "latency"
    files = ref["baseline"]["compared"]["files"]
    assert set(files) == {"metrics/inference_iters.parquet", "metrics/derived_metrics.json",
                          "profiler/kernels.parquet"}
    assert files == ref["session"]["compared"]["files"]
    assert ref["baseline"]["session_id"] == ref["session"]["session_id"]

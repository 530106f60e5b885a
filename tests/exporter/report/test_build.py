"""`aaco-exporter report` (exporter.report): the static page and its plots,
on a replay bundle of a real rocprof trace (tests/exporter/replayed.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from exporter.report import EXTRA_MISSING
from exporter.report.build import write_report
from tests.exporter.replayed import SEISMIC, replay, run_cli


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A replay of the real seismic-stencils rocprof trace (1024 dispatches, 13 kernels)."""
    return replay([SEISMIC], tmp_path_factory.mktemp("rep"), {**os.environ})


def _imgs(html: str) -> list[str]:
    return re.findall(r'<img src="([^"]+)"', html)


@pytest.mark.slow
def test_report_of_a_replay_is_static_and_its_plots_exist(bundle: Path) -> None:
    """report.html references only local PNGs under plots/ (no script, no
    http), each a real image of the size the page declares; a bundle without
    iterations gets the kernel timeline and a note instead of latency plots;
    the table lists every kernel family's dispatch count."""
    r = run_cli(["report", str(bundle)], {**os.environ})
    assert r.returncode == 0, r.stderr
    page = Path(r.stdout.strip().splitlines()[-1])
    assert page == bundle / "report/report.html"
    html = page.read_text()
    assert "<script" not in html and "http://" not in html and "https://" not in html
    srcs = _imgs(html)
    assert srcs == ["plots/kernel_timeline.png", "plots/kernel_families.png",
                    "plots/top_kernels.png"]
    for src in srcs:
        w, h = re.search(rf'src="{src}" width="(\d+)" height="(\d+)"', html).groups()  # type: ignore[union-attr]
        with Image.open(page.parent / src) as im:
            assert im.format == "PNG" and im.size == (int(w), int(h))
    assert "latency plots omitted" in html
    assert "no roofline.json in this bundle" in html
    assert "top 13 of 13 kernel names" in html
    assert sorted(p.name for p in (page.parent / "plots").iterdir()) == sorted(
        Path(s).name for s in srcs)
    bott = json.loads((bundle / "metrics/bottleneck.json").read_text())
    assert f"<b>{bott['class']}</b>" in html


@pytest.mark.slow
def test_roofline_json_is_plotted_and_a_bad_one_is_a_note(bundle: Path) -> None:
    """A (synthetic) roofline.json with ceilings and two kernels gives
    plots/roofline.png; one without usable points gives a one-line note."""
    roof = bundle / "roofline.json"
    try:
        roof.write_text(json.dumps({
            "ceilings": {"peak_flops_per_s": 4.0e13, "bandwidth_bytes_per_s": 1.6e12},
            "kernels": [{"kernel_name": "a", "arithmetic_intensity": 0.5, "flops_per_s": 7e11},
                        {"kernel_name": "b", "arithmetic_intensity": 60.0,
                         "flops_per_s": 3e13}]}))
        html = write_report(bundle).read_text()
        assert "plots/roofline.png" in html and (bundle / "report/plots/roofline.png").is_file()
        roof.write_text(json.dumps({"kernels": [{"kernel_name": "a"}]}))
        html = write_report(bundle).read_text()
        assert "roofline.json: no kernel with arithmetic_intensity" in html
        assert not (bundle / "report/plots/roofline.png").exists()
    finally:
        roof.unlink()


def test_without_matplotlib_one_line_names_the_extra_and_exit_2(tmp_path: Path) -> None:
    """With matplotlib not importable, `report` prints one line naming the
    'report' extra and exits 2, writing nothing."""
    code = ("import sys; sys.modules['matplotlib'] = None; sys.argv = ['aaco-exporter', "
            f"'report', {str(tmp_path)!r}]; from exporter.cli import main; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, check=False, env={**os.environ})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [EXTRA_MISSING]
    assert not (tmp_path / "report").exists()


def test_a_directory_that_is_not_a_bundle_exits_2(tmp_path: Path) -> None:
    """No session.json: exit 2, the message names the file."""
    r = run_cli(["report", str(tmp_path)], {**os.environ})
    assert r.returncode == 2 and "session.json: missing" in r.stderr


@pytest.mark.slow
def test_a_judged_bundle_shows_its_verdict_and_baseline(bundle: Path, tmp_path: Path) -> None:
    """After `diff --baseline NAME` the report names the baseline and the
    verdict (kernel mode, no regression, 0% delta)."""
    env = {**os.environ, "AACO_BASELINE_DIR": str(tmp_path / "store")}
    assert run_cli(["baseline", "save", "seis", str(bundle)], env).returncode == 0
    assert run_cli(["diff", "--baseline", "seis", str(bundle)], env).returncode == 0
    try:
        html = write_report(bundle).read_text()
    finally:
        shutil.rmtree(bundle / "regress")
    assert "<h2>Regression verdict</h2>" in html
    assert ("regression: False (severity none, mode kernels, delta 0%) against baseline seis"
            in html)

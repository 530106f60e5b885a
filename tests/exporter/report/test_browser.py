"""The report seen in a real browser: headless Chromium (Debian's `chromium`)
renders report/report.html of a real `capture --model magika` bundle, and
the screenshot shows every plot where the page puts it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from exporter.report.build import write_report
from tests.exporter.replayed import run_cli

WINDOW = (1100, 6000)  # taller than the page: the whole report in one screenshot
OUTLINE = 3  # px, magenta, drawn around every <img> in the probe copies
PROBE_CSS = f"<style>img{{outline:{OUTLINE}px solid #f0f;margin:24px 0}}</style></head>"
U8 = npt.NDArray[np.uint8]


def _chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:  # an apt test fails without its package (CI installs it)
        pytest.fail("chromium not on PATH: apt-get install chromium (make system-deps)")
    return exe


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.html of a real magika capture (20 iterations): 4 plots."""
    out = tmp_path_factory.mktemp("mag")
    r = run_cli(["capture", "--model", "magika", "--iterations", "20", "--warmup", "2",
                 "--out", str(out), "--quiet"], {**os.environ}, timeout=400)
    assert r.returncode == 0, r.stderr
    return write_report(Path(r.stdout.strip().splitlines()[-1]))


def _screenshot(html: Path, png: Path) -> U8:
    r = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--force-device-scale-factor=1", f"--user-data-dir={png.parent / 'chromium'}",
         f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}", html.as_uri()],
        capture_output=True, text=True, timeout=180, check=False)
    assert png.is_file(), r.stderr[-2000:]
    with Image.open(png) as im:
        return np.asarray(im.convert("RGB"))


def _boxes(shot: U8) -> list[tuple[int, int, int, int]]:
    """Inner boxes (top, bottom, left, right; exclusive ends) of the magenta
    outlines: pairs of horizontal edges, each a run of rows with many
    magenta pixels."""
    px = shot.astype(np.int16)
    mag = (px[..., 0] > 200) & (px[..., 1] < 60) & (px[..., 2] > 200)
    rows = np.flatnonzero(mag.sum(axis=1) > 300)
    runs = np.split(rows, np.flatnonzero(np.diff(rows) > 1) + 1) if len(rows) else []
    assert len(runs) % 2 == 0, f"unpaired outline edges at rows {[r[0] for r in runs]}"
    out = []
    for top, bottom in zip(runs[::2], runs[1::2], strict=True):
        cols = np.flatnonzero(mag[top[0]])
        out.append((int(top[-1]) + 1, int(bottom[0]), int(cols[0]) + OUTLINE,
                    int(cols[-1]) + 1 - OUTLINE))
    return out


@pytest.mark.apt
@pytest.mark.slow
def test_chromium_screenshot_shows_every_plot(report: Path, tmp_path: Path) -> None:
    """Each <img> of the page is found on the screenshot (by an outline the
    probe copy adds) at its PNG's size, and the pixels inside match the PNG
    (mean absolute difference < 8 of 255, over 1% of them dark). Control: the
    same page with its plots' files missing has the same boxes, blank."""
    html = report.read_text()
    srcs = re.findall(r'<img src="(plots/[^"]+)"', html)
    assert len(srcs) == 4  # latency histogram + timeline, families, top kernels
    probe = report.with_name("probe.html")
    probe.write_text(html.replace("</head>", PROBE_CSS, 1))
    blank = report.with_name("probe_blank.html")
    blank.write_text(html.replace("</head>", PROBE_CSS, 1).replace('src="plots/', 'src="gone/'))
    try:
        shot = _screenshot(probe, tmp_path / "report.png")
        control = _screenshot(blank, tmp_path / "blank.png")
    finally:
        probe.unlink()
        blank.unlink()
    boxes = _boxes(shot)
    assert len(boxes) == len(srcs), f"{len(boxes)} image boxes on the screenshot"
    assert _boxes(control) == boxes  # same layout without the pictures
    for src, (t, b, left, right) in zip(srcs, boxes, strict=True):
        with Image.open(report.parent / src) as im:
            want = np.asarray(im.convert("RGB")).astype(np.int16)
        got = shot[t:b, left:right].astype(np.int16)
        assert got.shape == want.shape, (src, got.shape, want.shape)
        assert float(np.abs(got - want).mean()) < 8.0, src
        ink = float((got.min(axis=2) < 200).mean())
        assert ink > 0.01, (src, ink)  # axes, ticks, labels and data at least
        assert float((control[t:b, left:right].min(axis=2) < 200).mean()) < ink / 3, src

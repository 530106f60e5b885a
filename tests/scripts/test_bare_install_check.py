"""``scripts/bare-install-check.sh``: a bare ``pip install .`` (no extras, from
PyPI, into a fresh venv) runs ``run``, ``capture -- CMD`` and ``replay``, and
each feature that needs an extra says which, in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bare-install-check.sh"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bare_install_runs_the_daemon_and_captures_and_names_missing_extras() -> None:
    """The script's every step passes (about 2 minutes: it installs from PyPI);
    its last line is the verdict."""
    r = subprocess.run(["bash", str(SCRIPT), sys.executable], capture_output=True, text=True,
                       timeout=880, check=False)
    out = r.stdout.strip().splitlines()
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert out[-1] == "bare install check: ok"
    steps = [ln for ln in out if ln.startswith("== ")]
    assert len(steps) == 7, steps

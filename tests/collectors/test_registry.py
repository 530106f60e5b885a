"""The plugin registry survives a broken plugin: the others load, the failure
is named, and the registry is not left half-loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_plugin_that_fails_to_import_leaves_the_others_loaded(tmp_path: Path) -> None:
    """A temporary copy of the collectors package with one broken plugin:
    available() lists every other plugin, failed() names the broken one with
    its error, and create() of it says it failed to load (fresh interpreter,
    so the real registry of this test process is untouched)."""
    pkg = tmp_path / "collectors"
    subprocess.run(["cp", "-r", str(ROOT / "collectors"), str(pkg)], check=True)
    (pkg / "aaa_broken").mkdir()
    (pkg / "aaa_broken" / "__init__.py").write_text("raise RuntimeError('plugin bug')\n")
    code = textwrap.dedent("""
        import sys
        from collectors.base import available, create, failed, CollectorContext
        names = available()
        print(sorted(failed()))
        print(failed()["aaa_broken"])
        print("sched" in names and "gpu" in names and "discovery" in names)
        try:
            create("aaa_broken", CollectorContext())
        except KeyError as e:
            print(e.args[0])
        print(available() == names)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": f"{tmp_path}:{ROOT}",
                                                      "PATH": "/usr/bin:/bin"})
    lines = out.stdout.splitlines()
    assert lines[:3] == ["['aaa_broken']", "RuntimeError: plugin bug", "True"], out.stderr
    assert "failed to load: RuntimeError: plugin bug" in lines[3]
    assert lines[4] == "True"

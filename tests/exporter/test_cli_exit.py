"""``exporter.cli.main``: a bulk command (``replay``) ends its process
without the interpreter's teardown, keeping its exit status, its output and
the ``atexit`` handlers; other commands end as usual. Each case runs the
console-script entry point in a fresh interpreter. Whether the teardown ran
is seen from an object's ``__del__``, which only the teardown calls."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.exporter.replayed import V3_KERNELS

ROOT = Path(__file__).resolve().parents[2]

ENTRY = textwrap.dedent("""
    import atexit, sys

    class Witness:
        def __del__(self):
            sys.stderr.write("teardown ran\\n")

    witness = Witness()  # a module global: deleted by the teardown only
    atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
    import gc
    atexit.register(lambda: sys.stderr.write(f"gc enabled: {gc.isenabled()}\\n"))
    sys.argv = ["aaco-exporter", *sys.argv[1:]]
    from exporter.cli import main
    main()
    """)


def _main(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    return subprocess.run([sys.executable, "-c", ENTRY, *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240, check=False)


def test_replay_skips_the_teardown_and_keeps_status_output_and_atexit(tmp_path: Path) -> None:
    """A successful replay exits 0 with its summary and bundle path on
    stdout (flushed), the bundle complete, the atexit handler run, and no
    teardown."""
    r = _main("replay", str(V3_KERNELS), "--out", str(tmp_path), "--quiet")
    assert r.returncode == 0, r.stderr
    bundle = Path(r.stdout.strip().splitlines()[-1])
    assert (bundle / "session.json").is_file() and (bundle / "trace.pftrace").is_file()
    assert "KAR" in r.stdout
    assert "atexit ran" in r.stderr
    assert "teardown ran" not in r.stderr
    assert "gc enabled: False" in r.stderr  # no collector passes in a bulk job


def test_an_in_process_replay_leaves_the_garbage_collector_on(tmp_path: Path) -> None:
    """Only the console-script entry point turns the collector off: a replay
    run in-process (typer's test runner, as the test suite does) leaves it
    on for the rest of the process."""
    import gc

    from typer.testing import CliRunner

    from exporter.cli import app

    assert gc.isenabled()
    r = CliRunner().invoke(app, ["replay", str(V3_KERNELS), "--out", str(tmp_path), "--quiet"])
    assert r.exit_code == 0, r.output
    assert gc.isenabled()


def test_a_failed_replay_keeps_its_exit_status_and_error_line(tmp_path: Path) -> None:
    """A replay of a path that does not exist exits 2 with its one-line error,
    also without the teardown."""
    missing = tmp_path / "nope.csv"
    r = _main("replay", str(missing), "--out", str(tmp_path), "--quiet")
    assert r.returncode == 2
    assert f"aaco-exporter: error: {missing}" in r.stderr
    assert "atexit ran" in r.stderr
    assert "teardown ran" not in r.stderr


def test_other_commands_end_with_the_usual_teardown() -> None:
    """``--help`` (no bulk command) exits 0 through the normal teardown."""
    r = _main("--help")
    assert r.returncode == 0, r.stderr
    assert "replay" in r.stdout
    assert "atexit ran" in r.stderr
    assert "teardown ran" in r.stderr
    assert "gc enabled: True" in r.stderr

"""Start-up of the command line: ``aaco-exporter --help`` loads neither the
bus (nats-py) nor pyarrow, and ``replay`` starts its parser before it
imports the bus and the analytics, so the parse overlaps the rest of the
start-up (benchmarks/README.md, replay at the end of 2026-11-28)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "collectors/rocprof/testdata/kernel_trace.csv"
HEAVY = ("nats", "pyarrow", "asyncio", "exporter.bus", "exporter.session",
         "stream_analytics.engine")


def _fresh(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(ROOT)}).stdout
    return out.splitlines()


def test_importing_the_cli_loads_neither_the_bus_nor_pyarrow() -> None:
    """In a fresh interpreter ``exporter.cli`` (what ``--help`` runs) imports
    none of nats-py, pyarrow, asyncio, the bus or the session."""
    code = (f"import sys, exporter.cli\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules])\n")
    assert _fresh(code) == ["[]"]


def test_help_lists_the_commands() -> None:
    """``--help`` without the bus still names every command."""
    out = _fresh("import sys; sys.argv = ['aaco-exporter', '--help']\n"
                 "from exporter.cli import main\n"
                 "try:\n    main()\nexcept SystemExit:\n    pass\n")
    text = "\n".join(out)
    for command in ("capture", "run", "replay", "diff", "analytics"):
        assert command in text


def test_replay_parses_before_the_bus_and_the_analytics_are_imported() -> None:
    """``start_parsing`` (called by ``replay`` first) yields every kernel row of
    the fixture, as ``load_paths`` does, with nats-py, the session and the
    analytics engine still unimported."""
    code = (f"import sys\n"
            f"from pathlib import Path\n"
            f"from exporter.replay import start_parsing\n"
            f"p = start_parsing([Path({str(FIXTURE)!r})])\n"
            f"rows = sum(e.batch.num_rows for e in p.emits if e.signal == 'kernel_span')\n"
            f"print([m for m in ('nats', 'exporter.bus', 'exporter.session', "
            f"'stream_analytics.engine') if m in sys.modules])\n"
            f"print(rows)\n")
    from collectors.rocprof.rejects import Rejects
    from collectors.rocprof.replay import load_paths

    expected = sum(e.batch.num_rows for e in load_paths([FIXTURE], Rejects())
                   if e.signal == "kernel_span")
    assert expected > 0
    assert _fresh(code) == ["[]", str(expected)]


def test_start_parsing_names_a_missing_path() -> None:
    """A path that does not exist raises ``FileNotFoundError`` naming it,
    before any thread starts."""
    from exporter.replay import start_parsing

    with pytest.raises(FileNotFoundError, match="no/such/dir"):
        start_parsing([Path("no/such/dir")])

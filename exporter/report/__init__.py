"""``aaco-exporter report SESSION``: a static HTML report of a session bundle.

:func:`main_report` checks that the ``report`` extra (matplotlib) is
installed, then :func:`exporter.report.build.write_report` writes
``report/report.html`` and ``report/plots/*.png``. See docs/report.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXTRA_MISSING = ("aaco-exporter report: needs the 'report' extra (matplotlib): "
                 "pip install 'aaco-exporter[report]'")


def main_report(session: Path) -> int:
    """CLI body: print the report's path; exit status 2 (one line on stderr)
    without matplotlib or for a directory that is not a session bundle."""
    try:
        ok = importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        ok = False
    if not ok:
        print(EXTRA_MISSING, file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    from exporter.report.build import write_report

    try:
        path = write_report(Path(session))
    except (FileNotFoundError, ImportError) as e:
        print(f"aaco-exporter report: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0

"""The progress bar of bounded sessions (``replay``, ``capture``) on stderr.

:func:`bar` returns a ``rich.progress.Progress`` that draws on stderr only
when it is enabled (``--quiet`` disables it) and stderr is a terminal, and
removes itself when done, so scripts reading stdout see only the results.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)


def bar(enabled: bool = True) -> Progress:
    """A transient progress display on stderr (nothing when not ``enabled`` or
    when stderr is not a TTY)."""
    console = Console(stderr=True)
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                    disable=not enabled or not console.is_terminal, transient=True)

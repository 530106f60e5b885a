"""The progress bar of bounded sessions (``replay``, ``capture``) on stderr.

:func:`bar` returns a ``rich.progress.Progress`` that draws on stderr only
when stderr is a terminal, and removes itself when done, so scripts reading
stdout see only the results. With ``--quiet`` there is no bar at all: the
context manager gives ``None`` and rich is not imported (40-55 ms of start-up).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress


def bar(enabled: bool = True) -> contextlib.AbstractContextManager[Progress | None]:
    """A transient progress display on stderr (drawing nothing when stderr is
    not a TTY); a context giving ``None`` when not ``enabled``."""
    if not enabled:
        return contextlib.nullcontext()
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                    disable=not console.is_terminal, transient=True)

"""river's ``ADWIN`` and ``PageHinkley`` classes, imported when first needed.

``import river.drift`` runs that package's ``__init__``, which also imports
``KSWIN`` (``scipy.stats``) and ``river.datasets`` (``scipy.io``): about
0.8 s and 75 MB of RSS that the two detectors used here never touch
(measured: ``benchmarks/README.md``, always-on cost). So while
``river.drift`` itself is not imported yet, :func:`detector_class` loads only
the detector's own module (``river/drift/adwin.py`` or ``page_hinkley.py``,
which import ``river.base``, ``river.stats`` and river's Rust helper) under
its real name (``river.drift.adwin``, ...). A later ``import river.drift``
runs the package ``__init__`` as usual and finds those modules already in
``sys.modules``, so ``river.drift.ADWIN`` is the very class returned here.

river belongs to the ``analytics`` extra: without it :func:`detector_class`
raises :class:`~exporter.extras.MissingExtra`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from exporter.extras import require

FEATURE = "drift detection with page_hinkley and adwin"
"""What the ``analytics`` extra's river is needed for (the MissingExtra text)."""
_MODULES = {"ADWIN": "adwin", "PageHinkley": "page_hinkley"}
_lock = threading.Lock()


def _load(sub: str) -> ModuleType:
    full = f"river.drift.{sub}"
    mod = sys.modules.get(full)
    if mod is not None:
        return mod
    river = require("river", "analytics", FEATURE)
    if "river.drift" in sys.modules:  # the package is there already: the usual way
        return importlib.import_module(full)
    path = Path(next(iter(river.__path__))) / "drift" / f"{sub}.py"
    spec = importlib.util.spec_from_file_location(full, path)
    if spec is None or spec.loader is None or not path.is_file():
        return importlib.import_module(full)  # another layout: the usual way
    mod = importlib.util.module_from_spec(spec)
    sys.modules[full] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[full]
        raise
    return mod


def detector_class(name: str) -> Any:
    """``river.drift.<name>`` for ``name`` in ``ADWIN``, ``PageHinkley``.

    Raises ``KeyError`` for another name and
    :class:`~exporter.extras.MissingExtra` when river is not installed.
    """
    sub = _MODULES[name]
    with _lock:
        return getattr(_load(sub), name)

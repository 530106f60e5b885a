"""Instrument ONNX Runtime when (and only if) the program imports it.

:func:`instrument_when_imported` patches at once when ``onnxruntime`` is
already imported; otherwise it puts a finder first on ``sys.meta_path``
that, for the name ``onnxruntime`` only, finds the real spec with the other
finders and wraps its loader so that :func:`exporter.instrument.instrument_onnxruntime`
runs right after the package's module body. A program that never imports
onnxruntime never loads it (nor Arrow, nor NATS). Failures of ours are
swallowed: the program always runs.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

TARGET = "onnxruntime"


def _instrument() -> None:
    try:
        from exporter.instrument import instrument_onnxruntime

        instrument_onnxruntime()
    except Exception as e:  # never break the program
        with contextlib.suppress(Exception):
            sys.stderr.write(f"aaco-exporter instrument: not instrumented: "
                             f"{type(e).__name__}: {e}\n")


class _Loader(importlib.abc.Loader):
    """Delegates to the real loader, then instruments."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _instrument()


class OrtFinder(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` entry that sees only the ``onnxruntime`` package.

    It removes itself once the package is found (one shot).
    """

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        uninstall()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def uninstall() -> None:
    """Remove every :class:`OrtFinder` from ``sys.meta_path``."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, OrtFinder)]


def instrument_when_imported() -> None:
    """Instrument now if onnxruntime is imported, else when it is."""
    if TARGET in sys.modules:
        _instrument()
    elif not any(isinstance(f, OrtFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, OrtFinder())

"""Optional dependencies ("extras" of ``pyproject.toml``), imported when used.

A bare ``pip install aaco-exporter`` runs the daemon (``run`` without a
model) and ``capture -- CMD`` / ``replay``. Each feature below imports its
extra's module only when it is used; when the module is missing,
:func:`require` raises :class:`MissingExtra`, whose message is the one line
the CLI prints (exit status 2, no traceback):

==============  =========================================  =======================
extra           modules                                    features
==============  =========================================  =======================
``ort``         ``onnxruntime``, ``onnx``                  ``--model``, ``instrument``
``analytics``   ``river``, ``scipy``                       ADWIN / Page-Hinkley drift, ``diff``
``otlp``        ``opentelemetry-sdk``, ``-exporter-otlp``  ``--otlp-*``, ``--otlp-bus``
``perfetto``    ``perfetto``                               ``trace.pftrace`` in bundles
==============  =========================================  =======================

(``rocm`` and ``migraphx`` bring the ``onnxruntime`` module too, with AMD GPU
execution providers.)

>>> require("json", "none", "JSON").__name__
'json'
>>> require("no_such_module_aaco", "otlp", "OTLP export")
Traceback (most recent call last):
...
exporter.extras.MissingExtra: OTLP export needs the 'otlp' extra: pip install 'aaco-exporter[otlp]'
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """``feature`` needs the ``extra`` dependency group, which is not installed.

    ``str(e)`` is one line: ``<feature> needs the '<extra>' extra: pip install
    'aaco-exporter[<extra>]'``.
    """

    def __init__(self, feature: str, extra: str, module: str) -> None:
        self.feature, self.extra = feature, extra
        super().__init__(f"{feature} needs the {extra!r} extra: "
                         f"pip install 'aaco-exporter[{extra}]'", name=module)


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` (dotted name) or raise :class:`MissingExtra`.

    Only a missing ``module`` (or a missing package it lives in) becomes
    :class:`MissingExtra`; an ``ImportError`` from inside an installed module
    (a broken install) propagates as it is.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        parts = module.split(".")
        if e.name is None or e.name not in {".".join(parts[:i + 1]) for i in range(len(parts))}:
            raise
        raise MissingExtra(feature, extra, module) from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False

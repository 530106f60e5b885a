"""nats-py without its eager ``aiohttp`` import.

nats-py's ``nats.aio.transport`` imports ``aiohttp`` at import time, for its
WebSocket transport (``ws://`` / ``wss://`` server URLs), whenever aiohttp is
installed -- and the ``k8s`` extra's ``kubernetes`` client brings it in. In
the always-on daemon that is ~9 MB of RSS and ~0.17 s of start-up for a
transport that ``nats://`` and ``tls://`` URLs never use (issue 14: RSS <=
150 MB). :func:`import_nats` (run by ``exporter/__init__.py``, so before any
module here imports nats) imports nats-py with aiohttp hidden;
:func:`enable_websocket` hands nats-py aiohttp back before a ``ws://``
connect (:func:`exporter.bus.connect` calls it for such URLs).
"""

from __future__ import annotations

import importlib
import sys


def import_nats() -> None:
    """Import ``nats.aio.transport`` with ``aiohttp`` hidden, unless nats-py or
    aiohttp is already imported (then nothing changes). Afterwards ``import
    aiohttp`` works as usual for everyone else."""
    if "nats.aio.transport" in sys.modules or "aiohttp" in sys.modules:
        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # "import aiohttp" -> ImportError
    try:
        importlib.import_module("nats.aio.transport")
    except ImportError:  # nats-py missing: the caller's own import says so
        pass
    finally:
        if sys.modules.get("aiohttp", 0) is None:
            del sys.modules["aiohttp"]


def enable_websocket() -> None:
    """Give nats-py's WebSocket transport its ``aiohttp`` (imported now).

    Raises ``ImportError`` naming the missing package when aiohttp is not
    installed, as nats-py itself would at connect time."""
    try:
        aiohttp = importlib.import_module("aiohttp")
    except ImportError as e:
        raise ImportError("ws:// and wss:// NATS URLs need aiohttp "
                          "(pip install aiohttp)") from e
    transport = importlib.import_module("nats.aio.transport")
    transport.aiohttp = aiohttp  # type: ignore[attr-defined]

"""Import nats-py without its optional ``aiohttp`` import.

Imported by :mod:`exporter.bus` before nats-py itself. nats-py uses aiohttp
only for its WebSocket transport (``ws://``/``wss://`` server URLs), and
importing it took about 0.15 s of every command's start where it is
installed (it comes with the ``kubernetes`` client of the dev tools).
:func:`exporter.bus.websocket_transport` hands it back when a ``ws://`` or
``wss://`` URL asks for it. Nothing changes when nats-py or aiohttp is
already imported.
"""

from __future__ import annotations

import sys


def import_nats_without_aiohttp() -> None:
    """Import ``nats.aio.transport`` with ``import aiohttp`` failing (as when it
    is not installed, which nats-py handles), unless nats or aiohttp is
    already imported; ``aiohttp`` stays importable afterwards."""
    if "nats" in sys.modules or "aiohttp" in sys.modules:
        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # import aiohttp: ImportError
    try:
        import nats.aio.transport  # noqa: F401
    except ImportError:
        pass  # nats-py itself missing: the module that needs it says so
    finally:
        if "aiohttp" in sys.modules and sys.modules["aiohttp"] is None:
            del sys.modules["aiohttp"]


import_nats_without_aiohttp()

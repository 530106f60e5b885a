"""The collector plugin contract and its registry.

A collector is one small object with a ``collect()`` method, in the spirit of
prometheus/client_python: each call returns the batches gathered since the
previous call. The daemon calls it every ``interval_s`` seconds from a worker
thread and publishes what it returns on the bus; collectors never touch the bus
or bytes themselves.

>>> @register("example")
... class Example:
...     name = "example"
...     source = "synthetic"
...     interval_s = 1.0
...     def __init__(self, ctx: CollectorContext) -> None: ...
...     def collect(self) -> list[Emit]:
...         return []
...     def close(self) -> None: ...
>>> "example" in available()
True
>>> unregister("example")
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa


@dataclass(frozen=True)
class Emit:
    """One batch for the bus.

    ``signal`` is a key of :data:`exporter.schema.SCHEMAS`; ``key`` is a
    deterministic id for this piece of data, used as the ``Nats-Msg-Id``
    prefix so that a re-publish is deduplicated by JetStream.
    """

    signal: str
    batch: pa.RecordBatch | pa.Table
    key: str


@dataclass
class CollectorContext:
    """What a collector is told when it is built.

    ``pids`` is the live set of watched process ids, shared by every
    collector in a pipeline (the ORT collector adds its own pid, ``capture --
    CMD`` adds the child's). ``options`` is the collector's config section.
    """

    host: str = field(default_factory=socket.gethostname)
    pids: set[int] = field(default_factory=set)
    options: Mapping[str, Any] = field(default_factory=dict)
    log: Callable[[str], None] = print


@runtime_checkable
class Collector(Protocol):
    """The plugin Protocol.

    ``name`` is the registry name; ``source`` is the backend actually in use
    (``"proc"``, ``"ebpf"``, ``"sysfs"``, ``"none"``...) and is exported as
    ``aaco_collector_up{collector=name, source=source}``; ``interval_s`` is how
    often the daemon calls ``collect()``. ``collect()`` must not raise on bad
    input: it drops what it cannot use and reports it via ``drops()``.
    Optional attributes the daemon reads with ``getattr``: ``follows_pids``
    (``True``: also call ``collect()`` as soon as ``ctx.pids`` grows) and
    ``drops()``.
    """

    name: str
    source: str
    interval_s: float

    def collect(self) -> Iterable[Emit]: ...

    def close(self) -> None: ...


Factory = Callable[[CollectorContext], Collector]

OptionType = type | tuple[type, ...]
"""The type of one collector option: ``str``, ``int``, ``float`` (an int is
accepted), ``bool``, ``list``, ``dict``, or a tuple of those. A plugin lists
its options in a class attribute ``OPTIONS: Mapping[str, OptionType]``."""


def validate_options(name: str, options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check ``options`` of collector ``name`` against its ``OPTIONS``.

    ``where`` prefixes each error (``"aaco.toml:collectors.gpu"``). Raises
    ``ValueError`` of the form ``where.key: what is wrong`` for an unknown
    collector, an unknown key or a value of the wrong type; returns a copy.

    >>> validate_options("proc", {"interval_s": 2}, "f.toml:collectors.proc")
    {'interval_s': 2}
    >>> validate_options("proc", {"intervals": 2}, "f.toml:collectors.proc")
    Traceback (most recent call last):
    ...
    ValueError: f.toml:collectors.proc.intervals: unknown option; known: interval_s, proc_root
    """
    _load_builtin()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"{where}: unknown collector {name!r}; known: {known}")
    spec: Mapping[str, OptionType] | None = getattr(_REGISTRY[name], "OPTIONS", None)
    if spec is None:
        return dict(options)
    for key, value in options.items():
        if key not in spec:
            raise ValueError(f"{where}.{key}: unknown option; known: {', '.join(sorted(spec))}")
        t_or = spec[key]
        want: tuple[type, ...] = t_or if isinstance(t_or, tuple) else (t_or,)
        ok = any((isinstance(value, t) and not (t in (int, float) and isinstance(value, bool)))
                 or (t is float and isinstance(value, int) and not isinstance(value, bool))
                 for t in want)  # fmt: skip
        if not ok:
            names = " or ".join(t.__name__ for t in want)
            raise ValueError(f"{where}.{key}: expected {names}, got {value!r}")
    return dict(options)
_REGISTRY: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    """Class decorator: make ``name`` buildable by :func:`create`."""

    def deco(factory: Factory) -> Factory:
        _REGISTRY[name] = factory
        return factory

    return deco


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (tests, plugins reloading)."""
    _REGISTRY.pop(name, None)


def available() -> list[str]:
    """Registered collector names, sorted."""
    _load_builtin()
    return sorted(_REGISTRY)


def create(name: str, ctx: CollectorContext) -> Collector:
    """Build collector ``name``; raises ``KeyError`` naming the known ones."""
    _load_builtin()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        if f"collectors.{name}" in _failed:
            raise KeyError(f"collector {name!r} failed to load: "
                           f"{_failed[f'collectors.{name}']}") from None
        known = ", ".join(sorted(_REGISTRY))
        why = _failed.get(f"collectors.{name}") or _failed.get(f"entry point {name}")
        if why:
            raise KeyError(f"collector {name!r} failed to load: {why}") from None
        raise KeyError(f"unknown collector {name!r}; known: {known}") from None
    return factory(ctx)


_loaded = False
_loading = threading.RLock()
_loading_state = threading.local()
_failed: dict[str, str] = {}
log = logging.getLogger("aaco.collectors")


def failed() -> dict[str, str]:
    """Plugins that could not be loaded: ``collectors.<pkg>`` or
    ``entry point <name>`` -> ``"<ExceptionType>: <message>"`` (loads the
    registry first; empty when every plugin loaded)."""
    _load_builtin()
    return dict(_failed)


def _try_load(name: str, load: Callable[[], object]) -> None:
    """Run ``load``; on any exception record it under ``name`` and log it once."""
    try:
        load()
    except Exception as e:  # a broken plugin must not take the others down
        _failed[name] = f"{type(e).__name__}: {e}"
        log.warning("collector plugin %s failed to load: %s", name, _failed[name])


def _load_builtin() -> None:
    """Import every plugin sub-package of :mod:`collectors` (one folder a
    plugin, like Telegraf) and any ``aaco_exporter.collectors`` entry point,
    so that their ``@register`` decorators run.

    Each plugin is imported on its own: one that raises is recorded in
    :func:`failed`, logged once, and the rest still load. The registry is
    marked loaded only after every plugin was tried (a re-entrant call from
    a plugin being imported returns at once).
    """
    global _loaded
    if _loaded:
        return
    with _loading:
        if _loaded or getattr(_loading_state, "active", False):
            return
        _loading_state.active = True
        try:
            import importlib
            import pkgutil
            from importlib.metadata import entry_points

            import collectors

            for info in pkgutil.iter_modules(collectors.__path__):
                if info.ispkg:
                    mod = f"collectors.{info.name}"
                    _try_load(mod, lambda m=mod: importlib.import_module(m))  # type: ignore[misc]
            for ep in entry_points(group="aaco_exporter.collectors"):
                _try_load(f"entry point {ep.name}", ep.load)
            _loaded = True
        finally:
            _loading_state.active = False

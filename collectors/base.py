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

import socket
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
        if name in _FAILED:
            raise KeyError(f"collector {name!r} failed to load: {_FAILED[name]}") from None
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"unknown collector {name!r}; known: {known}") from None
    return factory(ctx)


_loaded = False
_FAILED: dict[str, str] = {}


def failed() -> dict[str, str]:
    """Plugins that could not be imported: name -> ``"ExcType: message"``.
    The others load regardless; :func:`create` names the failure."""
    _load_builtin()
    return dict(_FAILED)


def _load_builtin() -> None:
    """Import every plugin sub-package of :mod:`collectors` (one folder a
    plugin, like Telegraf) and any ``aaco_exporter.collectors`` entry point,
    so that their ``@register`` decorators run. Each import is tried on its
    own: a failing plugin is recorded in :func:`failed` (and logged once) and
    the rest still load; the registry counts as loaded only after the loop."""
    global _loaded
    if _loaded:
        return
    import functools
    import importlib
    import logging
    import pkgutil
    from importlib.metadata import entry_points

    import collectors

    loaders: list[tuple[str, Callable[[], object]]] = [
        (info.name, functools.partial(importlib.import_module, f"collectors.{info.name}"))
        for info in pkgutil.iter_modules(collectors.__path__) if info.ispkg]
    loaders += [(ep.name, ep.load) for ep in entry_points(group="aaco_exporter.collectors")]
    for name, load in loaders:
        try:
            load()
        except Exception as e:  # one broken plugin must not take the others with it
            _FAILED[name] = f"{type(e).__name__}: {e}"
            logging.getLogger("aaco.collectors").warning("collector plugin %s not loaded: %s",
                                                         name, _FAILED[name])
    _loaded = True

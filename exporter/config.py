"""``--config aaco.toml``: the daemon's settings in one TOML file (tomllib).

Sections:

=======================  ===================================================
``[run]``                any ``run`` flag, by its parameter name with
                         underscores (``metrics_addr``, ``watch_comm``,
                         ``otlp_endpoint``, ``pid = [1234]``, ...)
``[collectors.NAME]``    a collector plugin's options, checked against the
                         plugin's ``OPTIONS`` (its ``sample.toml`` shows
                         them); ``[[collectors.NAME]]`` (Telegraf style, one
                         table) is read the same. A section turns the
                         collector on.
``[otlp]``               :class:`~exporter.sinks.otlp.OtlpConfig` keys that
                         have no flag: ``sample_every``, ``top_k``,
                         ``orphan_cap``, ``service_name``,
                         ``client_cert_file``, ``client_key_file``,
                         ``timeout_s``, ``batch_rows``, ``export_interval_s``,
                         ``resource_attributes`` (a table), ...
=======================  ===================================================

Precedence: flag > environment (``OTEL_*``, ``AACO_NATS_PASSWORD``...) > file
> default; for ``[run]`` keys this is click's ``default_map``.

Errors: :class:`ConfigError`, one line of the form ``FILE:KEY: what is wrong``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECTIONS = ("run", "collectors", "otlp")
OTLP_KEYS: dict[str, type | tuple[type, ...]] = {
    "endpoint": str, "protocol": str, "headers": dict, "insecure": bool, "ca_file": str,
    "client_cert_file": str, "client_key_file": str, "compression": str,
    "timeout_s": (int, float), "service_name": str, "sample_every": int, "top_k": int,
    "orphan_cap": int, "batch_rows": int, "export_interval_s": (int, float),
    "max_resources": int, "max_queue_size": int, "resource_attributes": dict,
}
"""``[otlp]`` keys and their TOML types (each an ``OtlpConfig`` field)."""


class ConfigError(ValueError):
    """A config file that cannot be used; the message is ``FILE:KEY: why``."""


@dataclass
class FileConfig:
    """A parsed, checked config file."""

    path: Path
    run: dict[str, Any] = field(default_factory=dict)
    collectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    otlp: dict[str, Any] = field(default_factory=dict)


def _table(path: Path, key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return dict(value[0])  # [[collectors.NAME]], Telegraf style
    if not isinstance(value, dict):
        raise ConfigError(f"{path}:{key}: expected a table")
    return dict(value)


def load_config(path: Path) -> FileConfig:
    """Read and check ``path`` (see the module doc); collector options are
    checked with :func:`collectors.base.validate_options`."""
    from collectors.base import validate_options

    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not TOML: {e}") from None
    out = FileConfig(path)
    for key in data:
        if key not in SECTIONS:
            raise ConfigError(f"{path}:{key}: unknown section; known: {', '.join(SECTIONS)}")
    out.run = _table(path, "run", data.get("run", {}))
    for name, value in _table(path, "collectors", data.get("collectors", {})).items():
        where = f"{path}:collectors.{name}"
        try:
            out.collectors[name] = validate_options(name, _table(path, where, value), where)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    out.otlp = _table(path, "otlp", data.get("otlp", {}))
    for key, value in out.otlp.items():
        want = OTLP_KEYS.get(key)
        if want is None:
            raise ConfigError(f"{path}:otlp.{key}: unknown key; known: {', '.join(OTLP_KEYS)}")
        if not isinstance(value, want) or (isinstance(value, bool) and want in (int, float)):
            raise ConfigError(f"{path}:otlp.{key}: wrong type {type(value).__name__}")
    if "timeout_s" in out.otlp:
        out.otlp["timeout_s"] = float(out.otlp["timeout_s"])
    return out


def to_toml(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """A small TOML writer for ``config show``: tables of scalars, lists and
    sub-tables (``None`` values are left out, as TOML has no null).

    >>> print(to_toml({"run": {"metrics_addr": "0.0.0.0:9464", "pid": [1, 2], "x": None}}))
    [run]
    metrics_addr = "0.0.0.0:9464"
    pid = [1, 2]
    <BLANKLINE>
    """
    lines: list[str] = []

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, list | tuple):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{_key(k)} = {val(x)}" for k, x in v.items()) + "}"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    def table(name: str, body: Mapping[str, Any]) -> None:
        lines.append(f"[{name}]")
        subs = []
        for k, v in body.items():
            if v is None:
                continue
            if isinstance(v, dict) and name == "collectors":
                subs.append((k, v))
            else:
                lines.append(f"{_key(k)} = {val(v)}")
        lines.append("")
        for k, v in subs:
            table(f"{name}.{_key(k)}", v)

    for name, body in sections.items():
        if name == "collectors":
            for k, v in body.items():
                table(f"collectors.{_key(k)}", v)
        else:
            table(name, body)
    return "\n".join(lines)


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else f'"{k}"'


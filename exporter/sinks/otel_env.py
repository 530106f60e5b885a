"""OpenTelemetry's standard ``OTEL_*`` environment variables for the OTLP sink.

Every OpenTelemetry SDK and exporter honours these, and operators set them
cluster-wide; :func:`otlp_env` reads them into :class:`~exporter.sinks.otlp.
OtlpConfig` field values (spec: *OpenTelemetry Protocol Exporter* and *SDK
Environment Variables*):

=====================================  =====================================
``OTEL_EXPORTER_OTLP_ENDPOINT``        ``endpoint`` (setting it turns OTLP on)
``OTEL_EXPORTER_OTLP_PROTOCOL``        ``protocol``: ``grpc`` or ``http/protobuf``
``OTEL_EXPORTER_OTLP_HEADERS``         ``headers``: ``k=v,k2=v2``, URL-encoded values
``OTEL_EXPORTER_OTLP_CERTIFICATE``     ``ca_file``
``OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE``  ``client_cert_file``
``OTEL_EXPORTER_OTLP_CLIENT_KEY``      ``client_key_file``
``OTEL_EXPORTER_OTLP_COMPRESSION``     ``compression``: ``gzip`` or ``none``
``OTEL_EXPORTER_OTLP_TIMEOUT``         ``timeout_s`` (the variable is in milliseconds)
``OTEL_EXPORTER_OTLP_INSECURE``        ``insecure`` (gRPC: no TLS)
``OTEL_SERVICE_NAME``                  ``service_name``
``OTEL_RESOURCE_ATTRIBUTES``           ``resource_attributes`` (``k=v,…``)
``OTEL_SDK_DISABLED``                  ``true``: no OTLP export from the environment
=====================================  =====================================

Each ``OTEL_EXPORTER_OTLP_<X>`` also has per-signal forms
``OTEL_EXPORTER_OTLP_TRACES_<X>`` and ``OTEL_EXPORTER_OTLP_METRICS_<X>`` that
win for that signal; a per-signal HTTP endpoint is used as the full URL (no
``/v1/traces`` appended), as the spec says.

Errors: :class:`ValueError` naming the variable and what is wrong.

>>> env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_SERVICE_NAME": "inference",
...        "OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "m:4317"}
>>> e = otlp_env(env)
>>> e.generic["endpoint"], e.generic["timeout_s"], e.generic["service_name"]
('collector:4317', 2.5, 'inference')
>>> e.per_signal["metrics"]
{'endpoint': 'm:4317', 'endpoint_is_signal_url': True}
>>> e.enabled
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

PREFIX = "OTEL_EXPORTER_OTLP_"
SIGNALS = ("traces", "metrics")

_PATHS = {  # <X> -> OtlpConfig field
    "ENDPOINT": "endpoint",
    "PROTOCOL": "protocol",
    "HEADERS": "headers",
    "CERTIFICATE": "ca_file",
    "CLIENT_CERTIFICATE": "client_cert_file",
    "CLIENT_KEY": "client_key_file",
    "COMPRESSION": "compression",
    "TIMEOUT": "timeout_s",
    "INSECURE": "insecure",
}


@dataclass
class OtlpEnv:
    """What the environment says: generic field values, per-signal overrides,
    whether an endpoint was given, and whether the SDK is disabled."""

    generic: dict[str, Any] = field(default_factory=dict)
    per_signal: dict[str, dict[str, Any]] = field(default_factory=dict)
    disabled: bool = False

    @property
    def enabled(self) -> bool:
        """An endpoint is set (generic or per signal) and the SDK is not disabled."""
        has = "endpoint" in self.generic or any("endpoint" in d for d in self.per_signal.values())
        return has and not self.disabled


def parse_kv_list(var: str, text: str) -> dict[str, str]:
    """``k=v,k2=v2`` (W3C-baggage-like, values URL-decoded), as the spec
    defines for headers and resource attributes.

    >>> parse_kv_list("X", "api-key=a%20b, tenant=t1")
    {'api-key': 'a b', 'tenant': 't1'}
    """
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"{var}: {item.strip()!r} is not key=value")
        out[unquote(k.strip())] = unquote(v.strip())
    return out


def _bool(var: str, text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1"):
        return True
    if t in ("false", "0", ""):
        return False
    raise ValueError(f"{var}={text!r}: expected true or false")


def _value(var: str, fld: str, text: str) -> Any:
    if fld == "headers":
        return parse_kv_list(var, text)
    if fld == "timeout_s":
        try:
            ms = float(text)
        except ValueError:
            raise ValueError(f"{var}={text!r}: expected milliseconds") from None
        if ms <= 0:
            raise ValueError(f"{var}={text!r}: must be > 0 milliseconds")
        return ms / 1000.0
    if fld == "insecure":
        return _bool(var, text)
    if fld == "protocol" and text not in ("grpc", "http/protobuf"):
        raise ValueError(f"{var}={text!r}: supported protocols are grpc and http/protobuf")
    if fld == "compression" and text not in ("gzip", "none"):
        raise ValueError(f"{var}={text!r}: expected gzip or none")
    return text


def otlp_env(env: Mapping[str, str]) -> OtlpEnv:
    """Read the variables of the module doc from ``env`` (e.g. ``os.environ``)."""
    out = OtlpEnv()
    for x, fld in _PATHS.items():
        var = PREFIX + x
        if env.get(var):
            out.generic[fld] = _value(var, fld, env[var])
        for sig in SIGNALS:
            svar = f"{PREFIX}{sig.upper()}_{x}"
            if env.get(svar):
                d = out.per_signal.setdefault(sig, {})
                d[fld] = _value(svar, fld, env[svar])
                if fld == "endpoint":
                    d["endpoint_is_signal_url"] = True
    if env.get("OTEL_SERVICE_NAME"):
        out.generic["service_name"] = env["OTEL_SERVICE_NAME"]
    if env.get("OTEL_RESOURCE_ATTRIBUTES"):
        attrs = parse_kv_list("OTEL_RESOURCE_ATTRIBUTES", env["OTEL_RESOURCE_ATTRIBUTES"])
        out.generic["resource_attributes"] = attrs
        if "service.name" in attrs and "service_name" not in out.generic:
            out.generic["service_name"] = attrs["service.name"]
    out.disabled = _bool("OTEL_SDK_DISABLED", env.get("OTEL_SDK_DISABLED", "false"))
    return out


def build_otlp_config(flags: Mapping[str, Any], env: Mapping[str, str],
                      file: Mapping[str, Any] | None = None) -> Any:
    """The :class:`~exporter.sinks.otlp.OtlpConfig` from command-line ``flags``
    (only those given) over the environment over the config ``file``'s
    ``[otlp]`` values, or ``None`` when OTLP is off.

    Precedence: flag > environment (per-signal variable > generic) > file >
    default. OTLP is on when ``--otlp-endpoint`` is given, the file names an
    endpoint, or an endpoint variable is set and ``OTEL_SDK_DISABLED`` is not
    ``true``. Raises ``ValueError`` naming the variable or the field that is
    wrong, and :class:`~exporter.extras.MissingExtra` when OTLP is on but the
    ``otlp`` extra is not installed.
    """
    e = otlp_env(env)
    file = dict(file or {})
    if "endpoint" not in flags and "endpoint" not in file and not e.enabled:
        return None
    from exporter.extras import require

    for mod in ("opentelemetry.sdk", "opentelemetry.exporter.otlp", "opentelemetry.proto"):
        require(mod, "otlp", "OTLP export")  # MissingExtra (one line) without the extra
    from exporter.sinks.otlp import OtlpConfig  # the SDK only when OTLP is on

    per = {sig: {k: v for k, v in d.items()
                 if k not in flags and not (k == "endpoint_is_signal_url" and "endpoint" in flags)}
           for sig, d in e.per_signal.items()}
    fields = {**file, **e.generic, **flags}
    if ("insecure" not in fields and fields.get("protocol", "grpc") == "grpc"
            and str(fields.get("endpoint", "")).startswith("http://")):
        fields["insecure"] = True  # gRPC: an http:// scheme means no TLS (OTLP exporter spec)
    return OtlpConfig(**fields, per_signal=per)

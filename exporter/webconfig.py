"""``/metrics`` over HTTPS and basic auth, configured by a web config file.

The file follows Prometheus exporter-toolkit's format
(https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md),
so the same file works for node_exporter and ``aaco-exporter run
--web-config-file``::

    tls_server_config:
      cert_file: server.crt          # PEM; relative paths are relative to this file
      key_file: server.key
      client_ca_file: ca.crt         # optional, for mutual TLS
      client_auth_type: RequireAndVerifyClientCert
      min_version: TLS12             # TLS10..TLS13, default TLS12
      max_version: TLS13             # optional
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2b$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

Supported subset: ``cert_file``, ``key_file``, ``client_ca_file``,
``client_auth_type`` (``NoClientCert``, ``VerifyClientCertIfGiven``,
``RequireAndVerifyClientCert``; Python's ``ssl`` cannot request a client
certificate without verifying it, so ``RequestClientCert`` and
``RequireAnyClientCert`` are rejected), ``min_version``/``max_version``,
``http_server_config.headers`` (and ``http2``, accepted and ignored: the
server speaks HTTP/1.1), ``basic_auth_users``. Any other key is an error, as
is a duplicate key, so a typo never silently disables TLS or auth.

Errors: :func:`load_web_config` raises :class:`WebConfigError` whose message
starts with the file path and the dotted field (``tls_server_config.key_file``).
:func:`serve_metrics` raises ``OSError`` when the address cannot be bound.

The server (:class:`MetricsServer`) is a threading ``wsgiref`` server in a
daemon thread serving ``prometheus_client.make_wsgi_app`` (content
negotiation: text 0.0.4, OpenMetrics, gzip, ``name[]`` filters) on
``/metrics``, listening with a ``SOMAXCONN`` backlog (socketserver's default 5
made concurrent scrapes wait for SYN retransmits). TLS handshakes run in the
per-connection thread (a stalled client cannot block ``accept``); a plain-HTTP
request on a TLS port gets ``400 Client sent an HTTP request to an HTTPS
server`` like Go's server.
Basic auth failures get ``401`` with ``WWW-Authenticate: Basic``; bcrypt
results are cached per (user, bcrypt hash, supplied password digest) for
``auth_cache_ttl_s`` so a scrape does not pay a bcrypt each time, as
exporter-toolkit does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import bcrypt
import yaml
from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger("aaco.web")

CLIENT_AUTH_TYPES: Mapping[str, ssl.VerifyMode] = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
"""exporter-toolkit ``client_auth_type`` values this server supports."""

TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

_BCRYPT = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")
_TOP_KEYS = frozenset({"tls_server_config", "http_server_config", "basic_auth_users"})
_TLS_KEYS = frozenset({"cert_file", "key_file", "client_ca_file", "client_auth_type",
                       "min_version", "max_version"})
_HTTP_KEYS = frozenset({"headers", "http2"})
_UNSUPPORTED = {
    "cert": "inline certificates are not supported; use cert_file",
    "key": "inline keys are not supported; use key_file",
    "client_ca": "inline CAs are not supported; use client_ca_file",
    "cipher_suites": "cipher_suites is not supported (OpenSSL defaults are used)",
    "curve_preferences": "curve_preferences is not supported",
    "prefer_server_cipher_suites": "prefer_server_cipher_suites is not supported",
    "client_allowed_sans": "client_allowed_sans is not supported",
    "rate_limit": "rate_limit is not supported",
}


class WebConfigError(ValueError):
    """A web config file is unreadable or invalid.

    ``path`` is the file, ``field`` the dotted key at fault (``""`` for the
    whole file); ``str(err)`` is ``"<path>: <field>: <problem>"``.
    """

    def __init__(self, path: Path, field: str, problem: str) -> None:
        where = f"{path}: {field}: " if field else f"{path}: "
        super().__init__(where + problem)
        self.path = path
        self.field = field


@dataclass(frozen=True)
class TLSServerConfig:
    """Resolved ``tls_server_config`` (absolute paths)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """A server-side ``SSLContext``; raises ``ssl.SSLError``/``OSError`` on bad files."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = TLS_VERSIONS[self.min_version]
        if self.max_version is not None:
            ctx.maximum_version = TLS_VERSIONS[self.max_version]
        ctx.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            ctx.load_verify_locations(cafile=self.client_ca_file)
        ctx.verify_mode = CLIENT_AUTH_TYPES[self.client_auth_type]
        return ctx


@dataclass(frozen=True)
class WebConfig:
    """A parsed web config. ``WebConfig()`` is plain HTTP without auth.

    ``basic_auth_users`` maps user name to bcrypt hash (bytes);
    ``headers`` are added to every response.
    """

    tls: TLSServerConfig | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (like Go's UnmarshalStrict)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool | None):  # '? [a]: b', '{[a]: b}'
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a scalar, not {type(key).__name__}",
                key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _mapping(path: Path, name: str, value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WebConfigError(path, name, f"must be a mapping with string keys, got {value!r}")
    return value


def _check_keys(path: Path, prefix: str, d: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for k in d:
        where = f"{prefix}.{k}" if prefix else k
        if k in _UNSUPPORTED:
            raise WebConfigError(path, where, _UNSUPPORTED[k])
        if k not in allowed:
            raise WebConfigError(path, where,
                                 f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _file(path: Path, name: str, value: object, required: bool) -> Path | None:
    if value is None or value == "":
        if required:
            raise WebConfigError(path, name, "is required")
        return None
    if not isinstance(value, str):
        raise WebConfigError(path, name, f"must be a file path, got {value!r}")
    p = Path(value)
    p = p if p.is_absolute() else path.parent / p
    try:
        found = p.is_file()
    except (OSError, ValueError) as e:  # a name too long, a NUL byte in it
        raise WebConfigError(path, name, f"not a usable file path: {str(e)[:200]}") from e
    if not found:
        raise WebConfigError(path, name, f"file {p} does not exist")
    return p


def _tls(path: Path, raw: object) -> TLSServerConfig:
    name = "tls_server_config"
    d = _mapping(path, name, raw)
    _check_keys(path, name, d, _TLS_KEYS)
    cert = _file(path, f"{name}.cert_file", d.get("cert_file"), True)
    key = _file(path, f"{name}.key_file", d.get("key_file"), True)
    ca = _file(path, f"{name}.client_ca_file", d.get("client_ca_file"), False)
    auth = d.get("client_auth_type") or "NoClientCert"
    if not isinstance(auth, str) or auth not in CLIENT_AUTH_TYPES:
        raise WebConfigError(path, f"{name}.client_auth_type",
                             f"{auth!r} is not supported (one of {', '.join(CLIENT_AUTH_TYPES)})")
    if ca is not None and auth == "NoClientCert":
        raise WebConfigError(path, f"{name}.client_auth_type",
                             "client_ca_file is set but client_auth_type is NoClientCert")
    if ca is None and auth != "NoClientCert":
        raise WebConfigError(path, f"{name}.client_ca_file", f"is required by {auth}")
    vers: dict[str, str | None] = {}
    for k, default in (("min_version", "TLS12"), ("max_version", None)):
        v = d.get(k, default)
        if v is not None and (not isinstance(v, str) or v not in TLS_VERSIONS):
            raise WebConfigError(path, f"{name}.{k}",
                                 f"{v!r} is not one of {', '.join(TLS_VERSIONS)}")
        vers[k] = v
    assert cert is not None and key is not None
    tls = TLSServerConfig(cert, key, ca, str(auth), vers["min_version"] or "TLS12",
                          vers["max_version"])
    try:
        tls.ssl_context()
    except (ssl.SSLError, OSError) as e:
        raise WebConfigError(path, f"{name}.cert_file",
                             f"cannot load {cert} / {key}"
                             + (f" / {ca}" if ca else "") + f": {e}") from e
    return tls


def _users(path: Path, raw: object) -> dict[str, bytes]:
    name = "basic_auth_users"
    users: dict[str, bytes] = {}
    for user, h in _mapping(path, name, raw).items():
        where = f"{name}.{user}"
        if not user or ":" in user:
            raise WebConfigError(path, where, "user name must be non-empty without ':'")
        if not isinstance(h, str) or not _BCRYPT.match(h):
            raise WebConfigError(path, where,
                                 "is not a bcrypt hash ($2a$/$2b$/$2y$, cost 04-31, 60 chars)")
        users[user] = h.encode()
    return users


def _http(path: Path, raw: object) -> dict[str, str]:
    name = "http_server_config"
    d = _mapping(path, name, raw)
    _check_keys(path, name, d, _HTTP_KEYS)
    if not isinstance(d.get("http2", True), bool):
        raise WebConfigError(path, f"{name}.http2", "must be true or false")
    headers = _mapping(path, f"{name}.headers", d.get("headers"))
    out: dict[str, str] = {}
    for k, v in headers.items():
        if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", k) or not isinstance(v, str) \
                or any(c in v for c in "\r\n\0"):
            raise WebConfigError(path, f"{name}.headers.{k}", "is not a valid HTTP header")
        out[k] = v
    return out


def load_web_config(path: Path | None) -> WebConfig:
    """Parse and validate a web config file; ``None`` gives ``WebConfig()``.

    Certificates and keys are loaded once here so a bad pair fails at start.
    Raises :class:`WebConfigError` naming the file and the field.
    """
    if path is None:
        return WebConfig()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise WebConfigError(path, "", f"cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise WebConfigError(path, "", f"not UTF-8 text: byte {e.start}: {e.reason}") from e
    try:
        raw = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise WebConfigError(path, "", f"invalid YAML: {e}") from e
    except RecursionError as e:
        raise WebConfigError(path, "", "invalid YAML: nested too deeply") from e
    except (OverflowError, ValueError) as e:  # PyYAML's scanner: "\\UXXXXXXXX" past U+10FFFF
        raise WebConfigError(path, "", f"invalid YAML: {e}") from e
    top = _mapping(path, "(top level)", raw)
    _check_keys(path, "", top, _TOP_KEYS)
    # A present but empty tls_server_config is an error (cert_file is required),
    # never a silent fallback to plain HTTP.
    tls = _tls(path, top["tls_server_config"]) if "tls_server_config" in top else None
    return WebConfig(tls=tls,
                     basic_auth_users=_users(path, top.get("basic_auth_users")),
                     headers=_http(path, top.get("http_server_config")),
                     source=path)


@cache
def _dummy_hash() -> bytes:
    """A bcrypt hash nobody knows, checked for unknown users (uniform timing)."""
    return bcrypt.hashpw(b"aaco-unknown-user", bcrypt.gensalt(10))


class BasicAuth:
    """Verifies ``Authorization: Basic`` headers against bcrypt hashes, with a TTL cache.

    The cache key is (user, stored hash, SHA-256 of the supplied password),
    so only a correct password can hit a positive entry; at most
    ``max_entries`` are kept.
    """

    def __init__(self, users: Mapping[str, bytes], ttl_s: float = 60.0,
                 max_entries: int = 1024) -> None:
        self.users = dict(users)
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.bcrypt_calls = 0
        self._cache: dict[tuple[str, bytes, bytes], tuple[float, bool]] = {}
        self._lock = threading.Lock()

    def check(self, header: str | None) -> bool:
        """True when ``header`` carries a listed user and its password."""
        if not header or header[:6].lower() != "basic ":
            return False
        try:
            user_b, sep, password = base64.b64decode(header[6:].strip(), validate=True) \
                .partition(b":")
            user = user_b.decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        stored = self.users.get(user)
        hashed = stored if stored is not None else _dummy_hash()
        key = (user, hashed, hashlib.sha256(password).digest())
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1] and stored is not None
        self.bcrypt_calls += 1
        try:
            ok = bcrypt.checkpw(password, hashed) and stored is not None
        except ValueError:  # > 72 bytes (bcrypt>=5) or a malformed hash
            ok = False
        with self._lock:
            if len(self._cache) >= self.max_entries:
                for k in [k for k, (t, _) in self._cache.items() if t <= now] or \
                        list(self._cache)[: self.max_entries // 2]:
                    del self._cache[k]
            self._cache[key] = (now + self.ttl_s, ok)
        return ok


def _wrap_app(metrics: WSGIApplication, auth: BasicAuth | None,
              headers: Mapping[str, str]) -> WSGIApplication:
    extra = list(headers.items())

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def respond(status: str, body: bytes, hdrs: list[tuple[str, str]]) -> list[bytes]:
            start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                    ("Content-Length", str(len(body))), *hdrs, *extra])
            return [body]

        if auth is not None and not auth.check(environ.get("HTTP_AUTHORIZATION")):
            return respond("401 Unauthorized", b"Unauthorized\n",
                           [("WWW-Authenticate", "Basic")])
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            def start_with_headers(status: str, hdrs: list[tuple[str, str]],
                                   exc_info: Any = None) -> Any:
                return start_response(status, [*hdrs, *extra], exc_info)

            return metrics(environ, start_with_headers)
        if path == "/":
            body = (b"<html><head><title>aaco-exporter</title></head><body>"
                    b'<h1>aaco-exporter</h1><p><a href="metrics">Metrics</a></p></body></html>\n')
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                                      ("Content-Length", str(len(body))), *extra])
            return [body]
        return respond("404 Not Found", b"Not Found\n", [])

    return app


class _Handler(WSGIRequestHandler):
    timeout = 30.0  # per-connection socket timeout (slow clients cannot pin a thread)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    # listen() backlog: socketserver's default 5 overflows under concurrent scrapes (the
    # kernel drops the SYN, the client retries after 1, 3, 7 s: a 10 s scrape timeout);
    # SOMAXCONN as Go's net.Listen, capped by net.core.somaxconn.
    request_queue_size = socket.SOMAXCONN
    ssl_ctx: ssl.SSLContext | None = None
    handshake_timeout_s = 10.0

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn (a DNS lookup); skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_ctx is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(self.handshake_timeout_s)
        first = request.recv(1, socket.MSG_PEEK)
        if not first:  # closed before sending anything
            return
        if first != b"\x16":  # not a TLS handshake record: plain HTTP
            request.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n"
                            b"Connection: close\r\n\r\n"
                            b"Client sent an HTTP request to an HTTPS server.\n")
            return
        with self.ssl_ctx.wrap_socket(request, server_side=True) as tls_sock:
            super().finish_request(tls_sock, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)


class MetricsServer:
    """A running ``/metrics`` server; ``port`` is the bound port (works with 0).

    ``url`` is ``http(s)://<host>:<port>/metrics``; ``shutdown()`` stops it,
    closes the socket and joins the thread (idempotent). Context manager.
    """

    def __init__(self, server: _Server, thread: threading.Thread, auth: BasicAuth | None) -> None:
        self._server = server
        self._thread = thread
        self.auth = auth
        self.host = str(server.server_address[0])
        self.port = int(server.server_address[1])
        self.tls = server.ssl_ctx is not None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}/metrics"

    def shutdown(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.shutdown()


def serve_metrics(registry: CollectorRegistry, host: str, port: int,
                  web: WebConfig | None, *, auth_cache_ttl_s: float = 60.0) -> MetricsServer:
    """Serve ``registry`` on ``host:port`` (``/metrics``) in a daemon thread.

    ``web=None`` (or ``WebConfig()``) is plain HTTP without auth. Returns a
    :class:`MetricsServer`; raises ``OSError`` if the address cannot be bound.
    """
    web = web or WebConfig()
    auth = BasicAuth(web.basic_auth_users, ttl_s=auth_cache_ttl_s) \
        if web.basic_auth_users else None
    app = _wrap_app(make_wsgi_app(registry), auth, web.headers)
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]

    class Server(_Server):
        address_family = family

    server = Server((host, port), _Handler, bind_and_activate=True)
    server.ssl_ctx = web.tls.ssl_context() if web.tls is not None else None
    server.set_app(app)
    # serve_forever wakes every poll_interval to check for shutdown(): 0.5 s (the
    # stdlib default) costs the idle daemon 2 wake-ups a second instead of 5
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                              name="aaco-metrics-http", daemon=True)
    thread.start()
    return MetricsServer(server, thread, auth)

"""The /metrics server with an exporter-toolkit web config: real HTTPS and basic auth.

Certificates are generated at test time with the ``openssl`` CLI; every scrape
is a real TCP (and TLS) connection to :func:`exporter.webconfig.serve_metrics`.
"""

from __future__ import annotations

import base64
import http.client
import shutil
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Counter

from exporter.webconfig import (
    MetricsServer,
    WebConfig,
    WebConfigError,
    load_web_config,
    serve_metrics,
)
from tests.support import make_pki

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl CLI")

PASSWORD = "correct horse"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()  # cost 4: fast tests


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("aaco_webconfig_test_scrapes", "A marker series", registry=reg).inc(3)
    return reg


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "web.yml"
    p.write_text(text)
    return p


def _tls_yaml(pki: dict[str, Path], extra: str = "") -> str:
    return (f"tls_server_config:\n  cert_file: {pki['server.crt']}\n"
            f"  key_file: {pki['server.key']}\n{extra}")


@pytest.fixture
def serve(registry: CollectorRegistry) -> Iterator[list[MetricsServer]]:
    started: list[MetricsServer] = []
    yield started
    for s in started:
        s.shutdown()


def _start(started: list[MetricsServer], registry: CollectorRegistry,
           web: WebConfig | None) -> MetricsServer:
    srv = serve_metrics(registry, "127.0.0.1", 0, web)
    started.append(srv)
    return srv


def _get(url: str, ctx: ssl.SSLContext | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


# -- TLS ------------------------------------------------------------------------


def test_https_scrape_verified_with_the_ca_returns_metrics(
        tmp_path: Path, pki: dict[str, Path], registry: CollectorRegistry,
        serve: list[MetricsServer]) -> None:
    """A TLS web config serves /metrics over HTTPS; a client trusting the CA scrapes it."""
    srv = _start(serve, registry, load_web_config(_write(tmp_path, _tls_yaml(pki))))
    assert srv.port != 0 and srv.url == f"https://127.0.0.1:{srv.port}/metrics"
    status, _, body = _get(srv.url, ssl.create_default_context(cafile=pki["ca.crt"]))
    assert status == 200
    assert b"aaco_webconfig_test_scrapes_total 3.0" in body


def test_https_client_without_the_ca_fails_certificate_verification(
        tmp_path: Path, pki: dict[str, Path], registry: CollectorRegistry,
        serve: list[MetricsServer]) -> None:
    """The server cert is signed by the test CA only: the system trust store rejects it."""
    srv = _start(serve, registry, load_web_config(_write(tmp_path, _tls_yaml(pki))))
    with pytest.raises(urllib.error.URLError) as ei:
        _get(srv.url, ssl.create_default_context())
    assert isinstance(ei.value.reason, ssl.SSLCertVerificationError)


def test_plain_http_to_the_tls_port_gets_400_and_no_metrics(
        tmp_path: Path, pki: dict[str, Path], registry: CollectorRegistry,
        serve: list[MetricsServer]) -> None:
    """Plain HTTP on the TLS port is answered 400 (like Go's server), never with metrics."""
    srv = _start(serve, registry, load_web_config(_write(tmp_path, _tls_yaml(pki))))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    assert resp.status == 400
    assert b"HTTP request to an HTTPS server" in body
    assert b"aaco_webconfig_test_scrapes" not in body


def test_silent_client_does_not_block_other_tls_scrapes(
        tmp_path: Path, pki: dict[str, Path], registry: CollectorRegistry,
        serve: list[MetricsServer]) -> None:
    """A connection that never starts its handshake does not stall the accept loop."""
    srv = _start(serve, registry, load_web_config(_write(tmp_path, _tls_yaml(pki))))
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5):
        status, _, _ = _get(srv.url, ssl.create_default_context(cafile=pki["ca.crt"]))
    assert status == 200


def test_mutual_tls_requires_a_client_cert_signed_by_the_client_ca(
        tmp_path: Path, pki: dict[str, Path], registry: CollectorRegistry,
        serve: list[MetricsServer]) -> None:
    """RequireAndVerifyClientCert: no client cert is refused, the CA-signed one scrapes."""
    web = load_web_config(_write(tmp_path, _tls_yaml(
        pki, f"  client_ca_file: {pki['ca.crt']}\n"
             "  client_auth_type: RequireAndVerifyClientCert\n")))
    srv = _start(serve, registry, web)
    anon = ssl.create_default_context(cafile=pki["ca.crt"])
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        _get(srv.url, anon)
    mtls = ssl.create_default_context(cafile=pki["ca.crt"])
    mtls.load_cert_chain(pki["client.crt"], pki["client.key"])
    status, _, body = _get(srv.url, mtls)
    assert status == 200 and b"aaco_webconfig_test_scrapes_total" in body


def test_relative_cert_paths_resolve_against_the_config_file(
        tmp_path: Path, pki: dict[str, Path]) -> None:
    """As in exporter-toolkit, cert_file/key_file are relative to the web config's folder."""
    cfg = pki["ca.crt"].parent / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    web = load_web_config(cfg)
    assert web.tls is not None and web.tls.cert_file == pki["server.crt"]


# -- basic auth -----------------------------------------------------------------


def test_basic_auth_right_password_200_wrong_or_missing_401(
        tmp_path: Path, registry: CollectorRegistry, serve: list[MetricsServer]) -> None:
    """bcrypt-checked users: right password 200; wrong, unknown user or none 401 + Basic."""
    srv = _start(serve, registry, load_web_config(
        _write(tmp_path, f"basic_auth_users:\n  prometheus: '{HASH}'\n")))
    status, _, body = _get(srv.url, headers=_basic("prometheus", PASSWORD))
    assert status == 200 and b"aaco_webconfig_test_scrapes_total 3.0" in body
    for headers in ({}, _basic("prometheus", "wrong"), _basic("nobody", PASSWORD),
                    {"Authorization": "Basic !!!not-base64"},
                    {"Authorization": "Bearer " + PASSWORD}):
        status, hdrs, body = _get(srv.url, headers=headers)
        assert (status, hdrs.get("WWW-Authenticate")) == (401, "Basic"), headers
        assert b"aaco_webconfig_test_scrapes" not in body


def test_basic_auth_caches_bcrypt_only_for_the_exact_password(
        tmp_path: Path, registry: CollectorRegistry, serve: list[MetricsServer]) -> None:
    """Repeated scrapes with the right password run bcrypt once; a wrong one is not a hit."""
    srv = _start(serve, registry, load_web_config(
        _write(tmp_path, f"basic_auth_users:\n  prometheus: '{HASH}'\n")))
    assert srv.auth is not None
    for _ in range(3):
        assert _get(srv.url, headers=_basic("prometheus", PASSWORD))[0] == 200
    assert srv.auth.bcrypt_calls == 1
    assert _get(srv.url, headers=_basic("prometheus", PASSWORD + "x"))[0] == 401
    assert srv.auth.bcrypt_calls == 2


def test_https_with_basic_auth_and_custom_headers(
        tmp_path: Path, pki: dict[str, Path], registry: CollectorRegistry,
        serve: list[MetricsServer]) -> None:
    """TLS and auth combine; http_server_config.headers appear on 200 and 401 responses."""
    web = load_web_config(_write(tmp_path, _tls_yaml(pki) + (
        f"basic_auth_users:\n  prometheus: '{HASH}'\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")))
    srv = _start(serve, registry, web)
    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    ok = _get(srv.url, ctx, _basic("prometheus", PASSWORD))
    denied = _get(srv.url, ctx)
    assert (ok[0], ok[1].get("X-Frame-Options")) == (200, "deny")
    assert (denied[0], denied[1].get("X-Frame-Options")) == (401, "deny")


# -- plain server behaviour -----------------------------------------------------


def test_no_web_config_serves_plain_http_with_content_negotiation(
        registry: CollectorRegistry, serve: list[MetricsServer]) -> None:
    """load_web_config(None): plain HTTP; OpenMetrics on request; unknown paths 404."""
    srv = _start(serve, registry, load_web_config(None))
    assert srv.url.startswith("http://")
    status, hdrs, body = _get(srv.url)
    assert status == 200 and hdrs["Content-Type"].startswith("text/plain; version=0.0.4")
    status, hdrs, body = _get(srv.url, headers={
        "Accept": "application/openmetrics-text; version=1.0.0"})
    assert hdrs["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert _get(srv.url.replace("/metrics", "/nope"))[0] == 404


def test_shutdown_closes_the_port(registry: CollectorRegistry) -> None:
    """After shutdown() the port refuses connections (no thread or socket left behind)."""
    srv = serve_metrics(registry, "127.0.0.1", 0, None)
    port = srv.port
    assert _get(srv.url)[0] == 200
    srv.shutdown()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_64_connections_complete_their_handshake_while_accept_is_stalled(
        registry: CollectorRegistry) -> None:
    """The listen backlog holds 64 concurrent connections that the server has not
    accepted yet (with socketserver's default backlog of 5 the kernel drops the SYNs of
    all but about 6, whose clients then wait for a retransmit)."""
    import select

    srv = serve_metrics(registry, "127.0.0.1", 0, None)
    srv._server.shutdown()  # stop the accept loop; the socket keeps listening
    socks = [socket.socket() for _ in range(64)]
    try:
        for s in socks:
            s.setblocking(False)
            assert s.connect_ex(("127.0.0.1", srv.port)) in (0, 115)  # 115: EINPROGRESS
        pending = set(socks)
        for _ in range(20):  # up to 2 s: loopback handshakes complete at once
            _, writable, _ = select.select([], list(pending), [], 0.1)
            pending -= {s for s in writable
                        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0}
            if not pending:
                break
        assert len(socks) - len(pending) == 64
    finally:
        for s in socks:
            s.close()
        srv.shutdown()


# -- config errors --------------------------------------------------------------


@pytest.mark.parametrize(("text", "field", "problem"), [
    ("tls_config: {{}}\n", "tls_config", "unknown key"),
    ("tls_server_config:\n  certfile: x\n", "tls_server_config.certfile", "unknown key"),
    ("tls_server_config:\n  key_file: {key}\n", "tls_server_config.cert_file", "is required"),
    ("tls_server_config:\n", "tls_server_config.cert_file", "is required"),
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: {key}\n",
     "tls_server_config.cert_file", "does not exist"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {ca_key}\n",
     "tls_server_config.cert_file", "cannot load"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_ca_file: {ca}\n",
     "tls_server_config.client_auth_type", "NoClientCert"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
     "  client_auth_type: RequestClientCert\n",
     "tls_server_config.client_auth_type", "not supported"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: SSL3\n",
     "tls_server_config.min_version", "not one of"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  cipher_suites: [x]\n",
     "tls_server_config.cipher_suites", "not supported"),
    ("basic_auth_users:\n  alice: secret\n", "basic_auth_users.alice", "not a bcrypt hash"),
    ("basic_auth_users:\n  bob: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8\n",
     "basic_auth_users.bob", "not a bcrypt hash"),
    ("basic_auth_users:\n  'a:b': '{hash}'\n", "basic_auth_users.a:b", "without ':'"),
    ("http_server_config:\n  headers:\n    Bad Header: x\n",
     "http_server_config.headers.Bad Header", "not a valid HTTP header"),
])
def test_bad_config_error_names_the_file_and_the_field(
        tmp_path: Path, pki: dict[str, Path], text: str, field: str, problem: str) -> None:
    """Each invalid web config raises WebConfigError "<file>: <field>: <problem>"."""
    path = _write(tmp_path, text.format(cert=pki["server.crt"], key=pki["server.key"],
                                        ca=pki["ca.crt"], ca_key=pki["ca.crt"].with_suffix(".key"),
                                        hash=HASH))
    with pytest.raises(WebConfigError) as ei:
        load_web_config(path)
    assert str(ei.value).startswith(f"{path}: {field}: "), str(ei.value)
    assert problem in str(ei.value)
    assert ei.value.field == field


@pytest.mark.parametrize(("text", "problem"), [
    ("basic_auth_users:\n  a: '{hash}'\n  a: '{hash}'\n", "duplicate key 'a'"),
    ("tls_server_config: [unclosed\n", "invalid YAML"),
    ("- just\n- a list\n", "must be a mapping"),
])
def test_malformed_file_error_names_the_file(tmp_path: Path, text: str, problem: str) -> None:
    """Duplicate keys, broken YAML and a non-mapping document fail with the path."""
    path = _write(tmp_path, text.format(hash=HASH))
    with pytest.raises(WebConfigError, match=problem) as ei:
        load_web_config(path)
    assert str(ei.value).startswith(f"{path}: ")


def test_missing_config_file_error_names_the_file(tmp_path: Path) -> None:
    """A web config path that does not exist fails at load, naming it."""
    with pytest.raises(WebConfigError, match=r"web\.yml: cannot read"):
        load_web_config(tmp_path / "web.yml")

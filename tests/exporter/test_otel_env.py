"""OpenTelemetry's OTEL_* environment variables configure the OTLP sink like
any OpenTelemetry exporter: precedence flag > per-signal variable > generic
variable > default, and `run` exports with only the environment set (real
gRPC receiver)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.natsserver import EmbeddedNats, free_port
from exporter.sinks.otel_env import build_otlp_config, otlp_env
from exporter.sinks.otlp import OtlpConfig, _grpc_kwargs, _http_url
from tests.support import ROOT, load_path

rx = load_path("aaco_otlp_receiver", ROOT / "tests/exporter/sinks/otlp_receiver.py")
EXE = str(Path(sys.executable).parent / "aaco-exporter")


def test_no_endpoint_anywhere_means_no_otlp() -> None:
    """Without --otlp-endpoint and without an endpoint variable, OTLP is off."""
    assert build_otlp_config({}, {"OTEL_SERVICE_NAME": "x"}) is None


def test_an_endpoint_in_the_environment_turns_otlp_on_with_every_generic_variable() -> None:
    """Each generic variable reaches its OtlpConfig field (timeout in ms)."""
    cfg = build_otlp_config({}, {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL":
        "http/protobuf", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%3Dx,tenant=t1",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": "/ca.pem",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/c.pem",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/k.pem", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1500", "OTEL_SERVICE_NAME": "infer",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,team=ml"})
    assert isinstance(cfg, OtlpConfig)
    assert (cfg.endpoint, cfg.protocol, dict(cfg.headers), cfg.ca_file, cfg.client_cert_file,
            cfg.client_key_file, cfg.compression, cfg.timeout_s, cfg.service_name) == (
        "http://c:4318", "http/protobuf", {"api-key": "s=x", "tenant": "t1"}, "/ca.pem",
        "/c.pem", "/k.pem", "gzip", 1.5, "infer")
    assert dict(cfg.resource_attributes) == {"deployment.environment": "prod", "team": "ml"}
    assert _http_url(cfg.for_signal("traces"), "/v1/traces") == "http://c:4318/v1/traces"


def test_per_signal_variables_win_for_their_signal_and_are_full_urls() -> None:
    """OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is used as is for metrics only."""
    cfg = build_otlp_config({}, {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL":
        "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:9999/custom",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "250"})
    assert _http_url(cfg.for_signal("metrics"), "/v1/metrics") == "http://m:9999/custom"
    assert _http_url(cfg.for_signal("traces"), "/v1/traces") == "http://c:4318/v1/traces"
    assert (cfg.for_signal("traces").timeout_s, cfg.for_signal("metrics").timeout_s) == (
        0.25, 10.0)


def test_flags_override_the_environment_for_both_signals() -> None:
    """A flag beats generic and per-signal variables alike."""
    cfg = build_otlp_config({"endpoint": "flag:4317", "insecure": True}, {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "env:4317",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "traces-env:4317",
        "OTEL_EXPORTER_OTLP_INSECURE": "false", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"})
    for sig in ("traces", "metrics"):
        c = cfg.for_signal(sig)
        assert (_grpc_kwargs(c)["endpoint"], c.insecure, c.compression) == (
            "flag:4317", True, "gzip")


def test_sdk_disabled_turns_env_configured_export_off_but_not_an_explicit_flag() -> None:
    """OTEL_SDK_DISABLED=true: no export from the environment; --otlp-endpoint
    still exports (flags override the environment)."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4317", "OTEL_SDK_DISABLED": "true"}
    assert build_otlp_config({}, env) is None
    assert build_otlp_config({"endpoint": "f:4317"}, env) is not None


@pytest.mark.parametrize(("var", "value", "match"), [
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "milliseconds"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "novalue", "not key=value"),
    ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd", "TRACES_COMPRESSION"),
    ("OTEL_SDK_DISABLED", "maybe", "OTEL_SDK_DISABLED"),
])
def test_a_bad_variable_is_one_clear_error_naming_it(var: str, value: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        otlp_env({var: value})


def test_run_fails_clearly_on_a_bad_variable(tmp_path: Path) -> None:
    """`run` exits 2 with one line naming the variable, not a traceback."""
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT="c:4317",
               OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
    r = subprocess.run([EXE, "run", "--duration", "1", "--nats-listen", "127.0.0.1:0",
                        "--metrics-addr", f"127.0.0.1:{free_port()}"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_run_exports_spans_and_metrics_with_only_otel_variables_set(tmp_path: Path) -> None:
    """With only OTEL_EXPORTER_OTLP_ENDPOINT (an http:// URL: gRPC without TLS)
    and OTEL_SERVICE_NAME in the environment and no --otlp flag, a real gRPC
    receiver gets spans and metrics, and the resource carries that service.name."""
    port = free_port()
    with rx.GrpcReceiver() as receiver, EmbeddedNats(tmp_path / "nats") as srv:
        env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{receiver.endpoint}",
                   OTEL_SERVICE_NAME="checkout-inference")
        proc = subprocess.Popen(
            [EXE, "run", "--model", "magika", "--nats", srv.url, "--metrics-addr",
             f"127.0.0.1:{port}", "--log-level", "WARNING"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            got = receiver.wait_for(lambda: len(receiver.traces) >= 1 and
                                    len(receiver.metrics) >= 1, timeout_s=60)
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
    assert got, f"no OTLP export within 60 s: {out.decode()[-2000:]}"
    spans = rx.spans_of(receiver.traces)
    assert spans
    assert {res["service.name"] for res, _ in spans} == {"checkout-inference"}
    assert rx.metric_points(receiver.metrics)

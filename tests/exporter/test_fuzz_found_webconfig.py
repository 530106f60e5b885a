"""Web config files the parser fuzzer found (benchmarks/fuzz_parsers.py) that made
``load_web_config`` raise something other than WebConfigError: bytes that are not
UTF-8, YAML nested past the recursion limit, a cert path too long for the OS,
and a list/mapping where client_auth_type or min_version belongs. Each is now a
WebConfigError naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.webconfig import WebConfigError, load_web_config

TLS = "tls_server_config:\n  cert_file: {cert}\n  key_file: server.key\n{extra}"


@pytest.mark.parametrize(("data", "field", "problem"), [
    (b"basic_auth_users:\n  prometheus: \xff\xfe\n", "", "not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000, "", "nested too deeply"),
    (TLS.format(cert="x" * 5000, extra="").encode(), "tls_server_config.cert_file",
     "not a usable file path"),
])
def test_unreadable_file_or_path_is_a_web_config_error(
        tmp_path: Path, data: bytes, field: str, problem: str) -> None:
    """UnicodeDecodeError, RecursionError and OSError(File name too long) became
    WebConfigError '<file>: <field>: <problem>'."""
    p = tmp_path / "web.yml"
    p.write_bytes(data)
    with pytest.raises(WebConfigError, match=problem) as e:
        load_web_config(p)
    assert e.value.field == field
    assert str(e.value).startswith(f"{p}: ")


@pytest.mark.parametrize("extra", ["  client_auth_type: [RequireAndVerifyClientCert]\n",
                                   "  min_version: {TLS12: 1}\n",
                                   "  max_version: [TLS13]\n"])
def test_unhashable_enum_value_is_a_web_config_error(tmp_path: Path, extra: str) -> None:
    """A list or mapping where a TLS enum belongs ('unhashable type' TypeError) names
    the field."""
    (tmp_path / "server.crt").write_text("x")
    (tmp_path / "server.key").write_text("x")
    p = tmp_path / "web.yml"
    p.write_text(TLS.format(cert="server.crt", extra=extra))
    key = extra.split(":")[0].strip()
    with pytest.raises(WebConfigError) as e:
        load_web_config(p)
    assert e.value.field == f"tls_server_config.{key}"


@pytest.mark.parametrize(("data", "problem"), [
    (b'basic_auth_users:\n  prometheus: "\\UFFFFFFFF"\n', "invalid YAML"),
    (b'basic_auth_users:\n  prometheus: "\\U00110000"\n', "invalid YAML"),
    (b"basic_auth_users:\n  ? [a, b]\n  : x\n", "a key must be a scalar"),
    (b"http_server_config: {{a: 1}: 2}\n", "a key must be a scalar"),
])
def test_yaml_escape_past_unicode_or_collection_key_is_invalid_yaml(
        tmp_path: Path, data: bytes, problem: str) -> None:
    """A '\\UFFFFFFFF' / '\\U00110000' escape (OverflowError / ValueError from chr() in
    PyYAML's scanner, the second found by the re-run) and a list/mapping as a
    mapping key (TypeError 'unhashable' in the duplicate-key check), found by the
    100k-case run: WebConfigError 'invalid YAML' naming the file."""
    p = tmp_path / "web.yml"
    p.write_bytes(data)
    with pytest.raises(WebConfigError, match=problem) as e:
        load_web_config(p)
    assert e.value.field == ""
    assert str(e.value).startswith(f"{p}: invalid YAML")

"""Fuzz: load_web_config returns a config or WebConfigError naming file and field for
mutated web config files (TLS with real certificates, basic auth, headers)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing.strategies import CI, check_parser
from tests.fuzzing.targets import WEBCONFIG

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl CLI")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_webconfig")


@pytest.mark.slow
@CI
@given(data=st.data())
def test_fuzz_web_config_file(work: Path, data: st.DataObject) -> None:
    """load_web_config on mutated exporter-toolkit web config files."""
    check_parser(WEBCONFIG, work, data)

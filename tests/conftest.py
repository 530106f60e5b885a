"""Shared fixtures: a real nats-server, the real magika ONNX model."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.ort import resolve_model
from exporter.natsserver import EmbeddedNats

REPO = Path(__file__).resolve().parents[1]
EXE = str(Path(sys.executable).parent / "aaco-exporter")


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A real nats-server with JetStream on a free port, stopped afterwards."""
    with EmbeddedNats(tmp_path / "nats") as srv:
        yield srv


@pytest.fixture(scope="session")
def magika_model() -> Path:
    """The real ONNX model shipped inside the ``magika`` PyPI package."""
    path = resolve_model("magika")
    assert path.is_file(), path
    return path


@pytest.fixture(scope="session")
def aaco() -> str:
    """Path of the ``aaco-exporter`` console script in this environment."""
    return EXE


@pytest.fixture(scope="session")
def repo() -> Path:
    """The repository root."""
    return REPO


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for running the console script in a subprocess."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env

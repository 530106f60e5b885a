"""A plugin that fails to import is recorded in failed() and logged once; the
other plugins still load and the registry is marked loaded only afterwards."""

from __future__ import annotations

import importlib.metadata
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import collectors
from collectors import base


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An extra ``collectors`` path entry with a broken and a good plugin, and a
    fresh registry load state (restored afterwards)."""
    (tmp_path / "a_broken").mkdir()
    (tmp_path / "a_broken/__init__.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "b_good").mkdir()
    (tmp_path / "b_good/__init__.py").write_text(
        "from collectors.base import register\n"
        "@register('b_good')\n"
        "class Good:\n"
        "    name = 'b_good'\n"
        "    source = 'test'\n"
        "    interval_s = 1.0\n"
        "    def __init__(self, ctx): pass\n"
        "    def collect(self): return []\n"
        "    def close(self): pass\n")
    monkeypatch.setattr(collectors, "__path__", [*collectors.__path__, str(tmp_path)])
    monkeypatch.setattr(base, "_loaded", False)
    monkeypatch.setattr(base, "_failed", {})
    yield tmp_path
    base.unregister("b_good")
    for m in ("collectors.a_broken", "collectors.b_good"):
        sys.modules.pop(m, None)


def test_broken_plugin_is_recorded_and_others_load(
        plugin_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The broken sub-package is in failed() with its error; the good one after
    it and the built-in ones are registered; one warning; loaded afterwards."""
    with caplog.at_level(logging.WARNING, logger="aaco.collectors"):
        names = base.available()
        base.available()  # a second call neither reloads nor logs again
    assert "b_good" in names and "proc" in names
    assert base.failed() == {"collectors.a_broken": "RuntimeError: boom at import"}
    assert base._loaded is True
    assert [r.getMessage() for r in caplog.records].count(
        "collector plugin collectors.a_broken failed to load: RuntimeError: boom at import") == 1
    with pytest.raises(KeyError, match="failed to load: RuntimeError"):
        base.create("a_broken", base.CollectorContext())


def test_failing_entry_point_is_recorded(plugin_dir: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point whose target cannot be imported is recorded by name;
    the built-in plugins still load."""
    ep = importlib.metadata.EntryPoint(name="ghost", value="aaco_no_such_module_xyz:Plugin",
                                       group="aaco_exporter.collectors")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [ep] if group == "aaco_exporter.collectors" else [])
    failed = base.failed()
    assert failed["entry point ghost"].startswith("ModuleNotFoundError: ")
    assert "proc" in base.available()

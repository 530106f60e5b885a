"""The embedded nats-server's GOMAXPROCS: ``run`` starts it with one Go thread
(its background traffic needs no more; issue 14's daemon CPU), and so do
capture and replay sessions (one thread stores and delivers their messages;
Go's idle threads cost a replay CPU); a GOMAXPROCS in the environment wins."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from exporter.bus import BusConfig
from exporter.daemon import EMBEDDED_NATS_GOMAXPROCS
from exporter.natsserver import EmbeddedNats
from exporter.pipeline import Pipeline


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(kv.decode().split("=", 1) for kv in raw if b"=" in kv)


def test_go_max_procs_reaches_the_servers_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """go_max_procs=1 -> GOMAXPROCS=1 in the server's environment; None -> unset."""
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    with EmbeddedNats(tmp_path / "a", go_max_procs=1) as one:
        assert one.proc is not None
        assert _environ(one.proc.pid).get("GOMAXPROCS") == "1"
    with EmbeddedNats(tmp_path / "b") as default:
        assert default.proc is not None
        assert "GOMAXPROCS" not in _environ(default.proc.pid)


def test_a_gomaxprocs_in_the_environment_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator's GOMAXPROCS=2 is what the server gets, whatever go_max_procs says."""
    monkeypatch.setenv("GOMAXPROCS", "2")
    with EmbeddedNats(tmp_path / "a", go_max_procs=1) as srv:
        assert srv.proc is not None
        assert _environ(srv.proc.pid).get("GOMAXPROCS") == "2"


def test_the_daemons_pipeline_starts_its_server_with_the_daemons_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Pipeline built as ``run`` builds it hands EMBEDDED_NATS_GOMAXPROCS (1) on."""
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    assert EMBEDDED_NATS_GOMAXPROCS == 1

    async def env() -> str | None:
        pipe = Pipeline("h", BusConfig(), state_dir=tmp_path / "s",
                        nats_go_max_procs=EMBEDDED_NATS_GOMAXPROCS)
        await pipe.open()
        try:
            assert pipe.server is not None and pipe.server.proc is not None
            return _environ(pipe.server.proc.pid).get("GOMAXPROCS")
        finally:
            await pipe.close()

    assert asyncio.run(env()) == "1"


def test_a_capture_or_replay_session_starts_its_server_with_one_go_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session.open (what capture and replay run) starts its embedded
    nats-server with NATS_GOMAXPROCS (1) in its environment."""
    from exporter.session import NATS_GOMAXPROCS, Session

    monkeypatch.delenv("GOMAXPROCS", raising=False)
    assert NATS_GOMAXPROCS == 1

    async def env() -> str | None:
        s = await Session.open("replay", BusConfig())
        try:
            assert s.pipe.server is not None and s.pipe.server.proc is not None
            return _environ(s.pipe.server.proc.pid).get("GOMAXPROCS")
        finally:
            await s.close()

    assert asyncio.run(env()) == "1"

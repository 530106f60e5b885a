"""The instrumentation publisher sends finished generate calls
(exporter/instrument/llm.py) as generate_span batches to a real nats-server:
every call once, with its steps and tokens, batched (not one message per call
or token); with the bus unreachable the calls are counted as llm_* drops."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import exporter.instrument as instr
from exporter.instrument import llm
from exporter.natsserver import EmbeddedNats, free_port
from tests.exporter.test_instrument import _make_stream, _read

CALLS = 40


def _generate(n: int) -> list[llm.GenerateRecord]:
    out = []
    for i in range(n):
        with llm.generate_span("m", batch_size=1 + i % 3) as g:
            for _ in range(1 + i % 5):
                g.token()
        out.append(g.record)
    return out


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Instrumentation torn down after the test; spans queued by earlier tests dropped."""
    monkeypatch.setenv("AACO_HOST", "llm-host")
    llm.take_pending(1 << 30)
    try:
        yield
    finally:
        instr.uninstrument_onnxruntime(0.5)


def test_finished_generate_calls_are_published_once_in_batches(
        nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch, fresh: None) -> None:
    """40 calls: the stream holds 40 generate_span rows with their own ids,
    step lists and token counts, in fewer messages than calls, on
    aaco.v1.generate_span.llm-host; stats() counts 40 published."""
    _make_stream(nats_server.url)
    monkeypatch.setenv("AACO_NATS_URL", nats_server.url)
    assert instr.instrument_onnxruntime()
    before = instr.stats()  # the process's recorder outlives uninstrument: deltas
    recs = _generate(CALLS)
    st = instr.shutdown(5.0)
    assert st.generates_published - before.generates_published == CALLS
    assert st.dropped == before.dropped
    msgs = asyncio.run(_read(nats_server.url, "generate_span"))
    assert 1 <= len(msgs) < CALLS
    assert {h["Aaco-Host"] for h, _ in msgs} == {"llm-host"}
    rows = [r for _, b in msgs for r in b.to_pylist()]
    assert sorted(r["generate_id"] for r in rows) == sorted(r.generate_id for r in recs)
    by_id = {r["generate_id"]: r for r in rows}
    for r in recs:
        got = by_id[r.generate_id]
        assert (got["step_ns"], got["step_tokens"], got["batch_size"], got["pid"]) == (
            r.step_ns, r.step_tokens, r.batch_size, r.pid)


def test_unreachable_bus_counts_every_call_as_an_llm_drop(
        monkeypatch: pytest.MonkeyPatch, fresh: None) -> None:
    """AACO_NATS_URL on a closed port: the calls still run; after the exit
    flush each one is counted under an llm_* reason, none published."""
    monkeypatch.setenv("AACO_NATS_URL", f"nats://127.0.0.1:{free_port()}")
    assert instr.instrument_onnxruntime()
    before = instr.stats()  # the process's recorder outlives uninstrument: deltas
    _generate(7)
    st = instr.shutdown(0.5)
    assert st.generates_published == before.generates_published
    llm_drops = {k: v - before.dropped.get(k, 0) for k, v in st.dropped.items()
                 if k.startswith("llm_") and v != before.dropped.get(k, 0)}
    assert sum(llm_drops.values()) == 7, st.dropped
    assert set(llm_drops) <= {"llm_publish_failed", "llm_shutdown"}

"""collectors/llmserve/stream_records.py on the real llama.cpp recording
(collectors/llmserve/testdata/llamacpp_smollm2_135m_rate-1.jsonl, see its
PROVENANCE.md): one generate record per streamed request, steps = the text
chunks, tokens = the server's count; bad lines name file:line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.llmserve.stream_records import SERVER, read_stream_file

DATA = Path(__file__).parents[3] / "collectors/llmserve/testdata"
LLAMA = DATA / "llamacpp_smollm2_135m_rate-1.jsonl"


def _raw() -> list[dict[str, object]]:
    return [json.loads(line) for line in LLAMA.read_text().splitlines()]


def test_one_record_per_request_with_the_files_chunks_as_steps() -> None:
    """40 lines -> 40 records, ids 0..39; each has as many steps as the line
    has text chunks, which is its ``chunks`` field less the role-only, final
    and usage chunks (3): 38 requests of 64 steps, requests 11 and 27 of 61."""
    s = read_stream_file(LLAMA)
    raw = _raw()
    assert [r.generate_id for r in s.records] == list(range(40))
    assert [len(r.step_ns) for r in s.records] == [int(str(x["chunks"])) - 3 for x in raw]
    short = {r.generate_id: len(r.step_ns) for r in s.records if len(r.step_ns) != 64}
    assert short == {11: 61, 27: 61}
    assert all(r.model == "llamacpp_smollm2_135m_rate-1" and r.batch_size == 1
               and r.error is None for r in s.records)


def test_tokens_equal_the_servers_predicted_count_and_surplus_sits_on_the_last_step() -> None:
    """Every request's tokens = 64 = llama.cpp's own ``timings.predicted_n``;
    request 11 (61 chunks for 64 tokens) carries the 3 extra on its last step."""
    s = read_stream_file(LLAMA)
    assert [sum(r.step_tokens) for r in s.records] == s.server["predicted_tokens"].to_pylist()
    assert set(s.server["predicted_tokens"].to_pylist()) == {64}
    r11 = s.records[11]
    assert r11.step_tokens[:-1] == [1] * 60 and r11.step_tokens[-1] == 4


def test_times_are_the_files_seconds_in_ns_and_end_is_the_last_chunk() -> None:
    """Request 0: sent 0.2764479530014796 s, first chunk 0.3365908949999721 s,
    last 0.576186004000192 s (copied from line 1 of the file)."""
    r = read_stream_file(LLAMA).records[0]
    assert r.start_ns == 276_447_953
    assert r.step_ns[0] == 336_590_895
    assert r.end_ns == r.step_ns[-1] == 576_186_004


def test_server_timings_become_a_typed_table_in_seconds() -> None:
    """Request 0's timings: prompt_n 35, prompt_ms 42.395, predicted_ms 243.213."""
    t = read_stream_file(LLAMA).server
    assert t.schema == SERVER and t.num_rows == 40
    row = t.to_pylist()[0]
    assert row == {"generate_id": 0, "prompt_tokens": 35, "prompt_s": pytest.approx(0.042395),
                   "predicted_tokens": 64, "predicted_s": pytest.approx(0.243213)}


@pytest.mark.parametrize(("line", "message"), [
    ("not json", ":2: not JSON"),
    ("[1, 2]", ":2: not a JSON object"),
    ('{"text_chunk_times": []}', ":2: missing field 'sent'"),
    ('{"sent": 1.0, "text_chunk_times": [2.0, 1.5]}', ":2: 'text_chunk_times' not ascending"),
    ('{"sent": 1.0, "text_chunk_times": ["x"]}', ":2: field 'text_chunk_times' is not a number"),
    ('{"sent": 1.0, "text_chunk_times": [2.0, 3.0], "output_tokens": 1}',
     ":2: field 'output_tokens' 1 < 2 text chunks"),
])
def test_a_bad_line_names_the_file_line_and_field(tmp_path: Path, line: str,
                                                  message: str) -> None:
    """Line 1 is the real file's first line; line 2 is broken as described."""
    p = tmp_path / "bad_synthetic.jsonl"
    p.write_text(LLAMA.read_text().splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(ValueError, match=str(p) + message.replace("[", r"\[")):
        read_stream_file(p)

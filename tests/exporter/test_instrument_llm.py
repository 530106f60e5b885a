"""generate_span's saved spans (exporter/instrument/llm.py): what `capture --
CMD` children write at exit reads back identically, a bad line is refused
naming its file and line, and step_session's wrapper leaves with the block."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.instrument.llm import generate_span, load, save


class _Session:
    """Stands in for an InferenceSession: only ``run`` is used."""

    def run(self, *a: object) -> str:
        return "out"


def test_saved_spans_load_back_and_a_bad_line_names_file_and_line(tmp_path: Path) -> None:
    """Round trip of two spans; a line that is not a span is refused with path:2."""
    sess = _Session()
    with generate_span("m", batch_size=2, step_session=sess) as g:
        assert sess.run() == "out" and sess.run() == "out"
    assert "run" not in vars(sess)  # the class's run again after the block
    with generate_span("m") as h:
        h.token(5)
    path = tmp_path / "123.jsonl"
    save(str(path), [g.record, h.record])
    back = load([str(path)])
    assert back == [g.record, h.record]
    assert back[0].step_tokens == [2, 2] and back[1].step_tokens == [5]
    path.write_text(path.read_text().splitlines()[0] + "\n{\"model\": 1}\n")
    with pytest.raises(ValueError, match=r"123\.jsonl:2: not a generate span"):
        load([str(path)])

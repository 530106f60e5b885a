"""A real ONNX generate loop, marked with generate_span, gives TTFT, ITL,
tokens/s and a batch curve in a bundle's llm/ files (exporter/llm_bundle.py).

The model is the GRU encoder-decoder shipped inside the ``arabic-name-romanizer``
PyPI package (resources/encoder.onnx, decoder.onnx; MIT): a character-level
seq2seq transliterator whose beam search runs ``decoder.run`` once per output
token step. It is an autoregressive ONNX decoder, not a large language model:
no PyPI package here ships an ONNX LLM, and hub downloads are not used."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from exporter.instrument.llm import GenerateRecord, generate_span
from exporter.llm_bundle import write_llm

romanizer = pytest.importorskip("arabic_name_romanizer.inference")

NAMES = ["محمد", "فاطمة", "عبد الله", "يوسف", "مريم", "خالد", "زينب", "عمر"] * 2


@pytest.fixture(scope="module")
def model() -> Any:
    res = Path(romanizer.__file__).parent / "resources"
    return romanizer.OnnxModel(res, beam_width=2, dedupe=False, intra_op_threads=1)


def _counting(sess: Any) -> list[int]:
    """Count the decoder's run calls with a wrapper of our own (independent
    of generate_span's)."""
    calls = [0]
    orig: Callable[..., Any] = sess.run

    def run(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        return orig(*a, **k)

    sess.run = run
    return calls


def test_generate_spans_over_a_real_onnx_decoder_give_a_batch_curve(
        tmp_path: Path, model: Any) -> None:
    """Batch sizes 1, 4 and 16, two calls each: every decoder run inside a
    span is one token step (counted independently), tokens = steps x batch,
    TTFT and ITL are positive, the curve has one row per batch size, and the
    bundle's llm/ files agree with the spans."""
    dec = model.backend.decoder
    calls = _counting(dec)
    recs: list[GenerateRecord] = []
    for bs in (1, 4, 16):
        for _ in range(2):
            before = calls[0]
            with generate_span("romanizer", batch_size=bs, step_session=dec) as g:
                out = model.transliterate_units(NAMES[:bs], None, 1)
            assert len(out) == bs and all(h for h in out)
            r = g.record
            assert len(r.step_ns) == calls[0] - before > 1
            assert sum(r.step_tokens) == len(r.step_ns) * bs
            assert r.start_ns < r.step_ns[0] <= r.step_ns[-1] <= r.end_ns
            recs.append(r)
    assert "run" in vars(dec)  # our counting wrapper is back after each span
    summary = write_llm(tmp_path, recs)
    curve = pq.read_table(tmp_path / "llm/batch_curve.parquet").to_pylist()
    assert [(c["batch_size"], c["generates"]) for c in curve] == [(1, 2), (4, 2), (16, 2)]
    assert all(c["ttft_p50_s"] > 0 and c["itl_p50_s"] > 0 and c["tokens_per_s_mean"] > 0
               for c in curve)
    steps = pq.read_table(tmp_path / "llm/generate_steps.parquet")
    assert steps.num_rows == sum(len(r.step_ns) for r in recs) == summary["steps"]
    gens = pq.read_table(tmp_path / "llm/generates.parquet")
    assert gens.num_rows == 6 and gens["error"].null_count == 6
    saved = json.loads((tmp_path / "llm/llm_summary.json").read_text())
    assert saved["tokens"] == sum(sum(r.step_tokens) for r in recs)
    assert len(saved["batch_curve"]) == 3


@pytest.mark.slow
def test_capture_command_turns_a_childs_generate_spans_into_llm_files(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """`aaco-exporter capture -- python romanizer_generate.py`: the child saves
    its 6 spans at exit (AACO_LLM_DIR), and the bundle's llm/ files hold them:
    one curve row per batch size 1, 4, 16, step counts as the child printed."""
    import subprocess
    import sys

    script = Path(__file__).with_name("romanizer_generate.py")
    exe = str(Path(sys.executable).parent / "aaco-exporter")
    r = subprocess.run([exe, "capture", "--out", str(tmp_path), "--", sys.executable,
                        str(script)], env=cli_env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    printed = [line.split() for line in r.stdout.splitlines()
               if line[:1].isdigit() and len(line.split()) == 3]
    assert [int(p[0]) for p in printed] == [1, 1, 4, 4, 16, 16]
    session = Path(r.stdout.strip().splitlines()[-1])
    gens = pq.read_table(session / "llm/generates.parquet")
    assert gens["batch_size"].to_pylist() == [1, 1, 4, 4, 16, 16]
    assert gens["steps"].to_pylist() == [int(p[1]) for p in printed]
    curve = pq.read_table(session / "llm/batch_curve.parquet")
    assert curve["batch_size"].to_pylist() == [1, 4, 16]
    assert len(list((session / "llm/raw").glob("*.jsonl"))) == 1

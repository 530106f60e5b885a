"""A real ONNX generate loop for the `capture -- CMD` LLM test: the
arabic-name-romanizer encoder-decoder (PyPI, MIT) transliterates names at
batch sizes 1, 4 and 16, two calls each, every call inside generate_span with
the decoder session's runs as token steps. Prints one line per call."""

from __future__ import annotations

from pathlib import Path

import arabic_name_romanizer.inference as R

from exporter.instrument.llm import generate_span

NAMES = ["محمد", "فاطمة", "عبد الله", "يوسف", "مريم", "خالد", "زينب", "عمر"] * 2

model = R.OnnxModel(Path(R.__file__).parent / "resources", beam_width=2, dedupe=False,
                    intra_op_threads=1)
for bs in (1, 4, 16):
    for _ in range(2):
        with generate_span("romanizer", batch_size=bs, step_session=model.backend.decoder) as g:
            out = model.transliterate_units(NAMES[:bs], None, 1)
        print(bs, len(g.record.step_ns), out[0][0][0])

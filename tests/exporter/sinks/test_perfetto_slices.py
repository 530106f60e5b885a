"""exporter.sinks.perfetto_slices: windowed encoding equals the one-shot encoding."""

from __future__ import annotations

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

from exporter.sinks import perfetto_slices as ps


def _cols(n: int) -> ps.SliceCols:
    """SYNTHETIC slices (seeded): nested and zero-length ones, two annotation
    columns with gaps, flows on some rows."""
    rng = np.random.default_rng(3)
    start = rng.integers(0, 1_000, n).astype(np.int64)
    end = start + rng.integers(0, 50, n)  # some zero-length
    vals = rng.integers(0, 1 << 40, n).astype(np.int64)
    return ps.SliceCols(
        start=start, end=end, track=rng.integers(2, 6, n).astype(np.int64),
        name_iid=rng.integers(1, 300, n).astype(np.int64),
        cat_iid=np.ones(n, np.int64), depth=rng.integers(0, 3, n).astype(np.int64),
        annotations=[ps.Annotation(3, "int", vals, vals % 3 > 0),
                     ps.Annotation(1, "str", vals % 7 + 1, vals % 2 > 0)],
        flow_out=np.where(vals % 5 == 0, np.arange(1, n + 1), 0).astype(np.int64))


@pytest.mark.parametrize("window", [1, 3, 100, 10_000])
def test_encode_windows_concatenate_to_encode(window: int) -> None:
    """The windows of encode_windows, joined, are byte for byte encode's output,
    and parse as 2 n packets."""
    s = _cols(500)
    data, count = ps.encode(s)
    parts = list(ps.encode_windows(s, window))
    assert b"".join(p for p, _ in parts) == data
    assert sum(c for _, c in parts) == count == 1000
    assert len(parts) == -(-1000 // window)
    assert len(Trace.FromString(data).packet) == 1000


def test_concat_fills_missing_annotations_as_absent() -> None:
    """concat keeps the named annotation columns in order; a part without one
    has it masked off."""
    a, b = _cols(4), _cols(3)
    b.annotations = b.annotations[:1]
    b.flow_out = None
    c = ps.concat([a, b], [(1, "str"), (3, "int")])
    assert c.n == 7 and [x.name_iid for x in c.annotations] == [1, 3]
    assert not c.annotations[0].mask[4:].any()
    assert c.flow_out is not None and not c.flow_out[4:].any()

"""The generate_span bus event (exporter/schema.py): one row per finished
generate call with its token steps in list columns; decode checks the row
invariants and names the field and row it refuses (reason bad_value)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from exporter import schema


def _calls(**over: Any) -> pa.Table:
    cols: dict[str, Any] = {
        "generate_id": [0, 1, 2], "model": ["m", "m", "n"], "pid": [7, 7, 7],
        "tid": [7, 7, 8], "batch_size": [2, 2, 1], "start_ns": [0, 100, 200],
        "end_ns": [50, 180, 260],
        "step_ns": [[10, 20, 30], [], [210]], "step_tokens": [[2, 2, 1], [], [1]],
        "error": [None, "RuntimeError", None],
    }
    cols.update(over)
    return pa.table(cols)


def _bytes_of(t: pa.Table) -> tuple[bytes, dict[str, str]]:
    """A message encoded without conform's checks (a foreign producer's bytes)."""
    rb = schema.conform("generate_span", t)
    msg = schema._message("generate_span", rb, "node-1", "m1", None)
    return msg.payload, msg.headers


def test_generate_span_round_trips_calls_and_their_step_lists() -> None:
    """Three calls (one failed without steps) come back with the same lists,
    on subject aaco.v1.generate_span.<host>."""
    msg = schema.encode("generate_span", _calls(), host="gpu.node", msg_id="x:0")
    assert msg.subject == "aaco.v1.generate_span.gpu_node"
    sig, _, host, b = schema.decode(msg.payload, msg.headers)
    assert (sig, host, b.num_rows) == ("generate_span", "gpu_node", 3)
    assert b.column("step_ns").to_pylist() == [[10, 20, 30], [], [210]]
    assert b.column("step_tokens").to_pylist() == [[2, 2, 1], [], [1]]
    assert b.column("error").to_pylist() == [None, "RuntimeError", None]


@pytest.mark.parametrize(("over", "field", "row"), [
    ({"step_tokens": [[2, 2], [], [1]]}, "step_tokens", "row 0"),
    ({"batch_size": [2, 0, 1]}, "batch_size", "row 1"),
    ({"end_ns": [50, 180, 150]}, "end_ns", "row 2"),
    ({"step_ns": [[10, 20, 30], [], [190]]}, "step_ns", "row 2"),
    ({"step_ns": [[10, 30, 20], [], [210]]}, "step_ns", "row 0"),
    ({"step_tokens": [[2, -2, 1], [], [1]]}, "step_tokens", "negative"),
    ({"step_ns": [[10, None, 30], [], [210]]}, "step_ns", "null elements"),
])
def test_decode_refuses_rows_breaking_the_invariants_naming_field_and_row(
        over: dict[str, Any], field: str, row: str) -> None:
    """Lists of different lengths, batch size 0, an end before the start, a
    step before the start or before the previous step, negative tokens and
    null steps are bad_value errors naming the field and the row."""
    payload, headers = _bytes_of(_calls(**over))
    with pytest.raises(schema.SchemaError, match=field) as e:
        schema.decode(payload, headers)
    assert e.value.reason == "bad_value"
    assert row in str(e.value)


def test_decode_checks_a_sliced_batch_by_its_own_rows() -> None:
    """check_values on a zero-copy slice (list offsets not starting at 0)
    judges only the slice's rows."""
    rb = schema.conform("generate_span", _calls(step_ns=[[10, 5, 30], [], [210]]))
    with pytest.raises(schema.SchemaError):
        schema.check_values("generate_span", rb)
    schema.check_values("generate_span", rb.slice(1, 2))

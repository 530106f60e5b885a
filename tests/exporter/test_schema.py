"""The one schema module: encoding, decoding, errors and subject safety."""

from __future__ import annotations

import pyarrow as pa
import pytest

from exporter import schema


def _kernels(n: int) -> pa.Table:
    return pa.table({
        "start_ns": list(range(n)), "end_ns": [i + 10 for i in range(n)],
        "duration_ns": [10] * n, "source": ["ort"] * n,
        "kernel_name": [f"k{i % 3}" for i in range(n)], "kernel_family": ["gemm"] * n,
    })


def test_round_trip_preserves_rows_and_headers() -> None:
    msg = schema.encode("kernel_span", _kernels(5), host="h.1", msg_id="x:0", session="s1")
    sig, ver, host, batch = schema.decode(msg.payload, msg.headers)
    assert (sig, ver, host) == ("kernel_span", schema.SCHEMA_VERSION, "h_1")
    assert batch.num_rows == 5
    assert batch.column("kernel_name").to_pylist() == ["k0", "k1", "k2", "k0", "k1"]
    assert msg.headers[schema.H_MSG_ID] == "x:0"
    assert msg.headers[schema.H_SESSION] == "s1"
    assert msg.subject == "aaco.v1.kernel_span.h_1"


def test_conform_names_the_missing_required_field() -> None:
    with pytest.raises(schema.SchemaError, match="start_ns") as e:
        schema.conform("kernel_span", pa.table({"end_ns": [1]}))
    assert e.value.reason == "missing_field"


def test_conform_rejects_uncastable_values_naming_the_field() -> None:
    t = _kernels(1).set_column(0, "start_ns", pa.array(["soon"]))
    with pytest.raises(schema.SchemaError, match="start_ns") as e:
        schema.conform("kernel_span", t)
    assert e.value.reason == "bad_type"


def test_conform_of_a_table_already_in_the_schema_is_the_general_result() -> None:
    """A many-chunk table built in the signal's schema (the fast path) gives
    the same single batch as a reordered copy (the general path), and a null
    in a required field is still refused, naming it."""
    t = schema.conform("kernel_span", _kernels(4))
    chunked = pa.Table.from_batches([t.slice(0, 1), t.slice(1, 3)])
    assert chunked.schema.equals(schema.KERNEL_SPAN) and chunked.column(0).num_chunks == 2
    fast = schema.conform("kernel_span", chunked)
    general = schema.conform("kernel_span", chunked.select(chunked.column_names[::-1]))
    assert isinstance(fast, pa.RecordBatch) and fast.equals(general) and fast.num_rows == 4
    nulls = chunked.set_column(0, schema.KERNEL_SPAN.field(0),
                               pa.array([None, 1, 2, 3], pa.int64()))
    with pytest.raises(schema.SchemaError, match=schema.KERNEL_SPAN.field(0).name) as e:
        schema.conform("kernel_span", nulls)
    assert e.value.reason == "null_field"


def test_conform_keeps_the_buffers_of_one_chunk_columns() -> None:
    """The general path (columns reordered, missing ones added) hands a
    column of one chunk on as it is, not copied: the conformed batch's
    ``start_ns`` values are the input's own buffer; columns of two chunks
    are combined into one."""
    t = _kernels(1000)
    one = schema.conform("kernel_span", t)
    assert one.column("start_ns").buffers()[1].address == (
        t.column("start_ns").chunk(0).buffers()[1].address)
    two = pa.Table.from_batches(t.to_batches(max_chunksize=600))
    assert two.column("start_ns").num_chunks == 2
    got = schema.conform("kernel_span", two)
    assert got.equals(one) and got.column("start_ns").to_pylist() == list(range(1000))


@pytest.mark.parametrize(("headers", "payload", "reason"), [
    ({}, b"", "missing_header"),
    ({schema.H_SCHEMA: "nope", schema.H_VERSION: "1"}, b"", "unknown_schema"),
    ({schema.H_SCHEMA: "kernel_span", schema.H_VERSION: "99"}, b"", "bad_version"),
    ({schema.H_SCHEMA: "kernel_span", schema.H_VERSION: "1"}, b"\x00garbage", "bad_payload"),
])
def test_decode_errors_carry_a_bounded_reason(headers: dict[str, str], payload: bytes,
                                              reason: str) -> None:
    with pytest.raises(schema.SchemaError) as e:
        schema.decode(payload, headers)
    assert e.value.reason == reason


def test_decode_rejects_a_batch_of_another_schema() -> None:
    other = schema.encode("iteration_span", pa.table({
        "start_ns": [0], "end_ns": [1], "duration_ns": [1], "source": ["ort"], "model": ["m"],
        "pid": [1], "iteration": [0], "kernel_count": [0]}), host="h")
    headers = dict(other.headers, **{schema.H_SCHEMA: "kernel_span"})
    with pytest.raises(schema.SchemaError) as e:
        schema.decode(other.payload, headers)
    assert e.value.reason == "schema_mismatch"


def test_encode_chunks_respects_the_payload_limit_and_numbers_ids() -> None:
    table = _kernels(20_000)
    msgs = list(schema.encode_chunks("kernel_span", table, host="h", msg_id_prefix="run",
                                     max_bytes=60_000))
    assert len(msgs) > 1
    assert all(len(m.payload) <= 60_000 for m in msgs)
    assert [m.headers[schema.H_MSG_ID] for m in msgs] == [f"run:{i}" for i in range(len(msgs))]
    assert sum(schema.decode(m.payload, m.headers)[3].num_rows for m in msgs) == 20_000


@pytest.mark.parametrize("hostile", ["a.b", "x*", "y>", "with space", "", "ü.日本", "a" * 300])
def test_hostile_host_names_cannot_inject_subject_tokens(hostile: str) -> None:
    subj = schema.subject("gauge_sample", hostile)
    token = subj.split(".", 3)[3]
    assert "." not in token and "*" not in token and ">" not in token and " " not in token
    assert 0 < len(token) <= 64

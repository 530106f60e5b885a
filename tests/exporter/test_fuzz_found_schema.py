"""Bus messages the parser fuzzer found (benchmarks/fuzz_parsers.py) that made
``exporter.schema.decode`` raise something other than SchemaError (ArrowMemoryError,
ArrowNotImplementedError, ArrowKeyError, UnicodeDecodeError), and payloads it used to
accept although their buffers are invalid or a non-nullable field holds nulls. Each
found input is rebuilt from its recipe (seed message from the recorded fixtures, then
the fuzzer's edits), so the test holds the exact bytes the fuzzer saw."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from exporter import schema
from tests.fuzzing.targets import BUS, case_from_recipe

FOUND = [  # recipe, what the old decode raised
    ('{"seed": 6, "structured": [], "plan": [["swap_fields", 2923241547], '
     '["flip", 1723062979]]}', "ArrowMemoryError: malloc of size 140737488355392"),
    ('{"seed": 3, "structured": [1581185563], "plan": [["flip", 3068565292]]}',
     "ArrowMemoryError: malloc of size 36028797018964032"),
    ('{"seed": 6, "structured": [], "plan": [["byte", 3384093423]]}',
     "UnicodeDecodeError in Schema.names"),
    ('{"seed": 5, "structured": [], "plan": [["byte", 2571179811], ["nest", 1812918614], '
     '["swap_lines", 3704376734]]}', "ArrowNotImplementedError: Integers with more than 64 bits"),
    ('{"seed": 3, "structured": [], "plan": [["truncate", 2501319942], '
     '["flip", 1837210927]]}', "ArrowKeyError: No record of dictionary type with id 17"),
]


@pytest.mark.parametrize(("recipe", "old"), FOUND, ids=[o.split(":")[0] for _, o in FOUND])
def test_found_corrupt_payloads_are_bad_payload(tmp_path: Path, recipe: str, old: str) -> None:
    """Each found message is refused with SchemaError('bad_payload') naming the signal."""
    _, data = case_from_recipe(BUS, tmp_path, recipe)
    head, _, payload = data.partition(b"\n")
    headers = {str(k): str(v) for k, v in json.loads(head).items()}
    with pytest.raises(schema.SchemaError) as e:
        schema.decode(payload, headers)
    assert e.value.reason == "bad_payload"
    assert str(e.value).startswith(headers["Aaco-Schema"])


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:  # uncompressed: bytes land as given
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _headers(signal: str) -> dict[str, str]:
    return {"Aaco-Schema": signal, "Aaco-Version": str(schema.SCHEMA_VERSION),
            "Aaco-Host": "h"}


def test_invalid_utf8_in_a_string_column_is_bad_payload() -> None:
    """A process_info batch whose comm bytes are not UTF-8 decoded fine before (Arrow
    checks buffers only on validate(full=True)); now bad_payload."""
    good = schema.conform("process_info", pa.table({
        "ts_ns": [1], "pid": [2], "comm": ["python"],
        "reason": pa.array(["kfd"]).dictionary_encode(), "create_ns": [3]}))
    comm = good.column("comm")
    bad_comm = pa.Array.from_buffers(pa.string(), 1, [None, comm.buffers()[1],
                                                      pa.py_buffer(b"\xff\xfe\xfd\xfc\xfb\xfa")])
    bad = pa.RecordBatch.from_arrays(
        [good.column(0), good.column(1), bad_comm, good.column(3), good.column(4)],
        schema=schema.PROCESS_INFO)
    with pytest.raises(schema.SchemaError) as e:
        schema.decode(_ipc(bad), _headers("process_info"))
    assert e.value.reason == "bad_payload"
    assert "invalid record batch" in str(e.value)


def test_null_in_a_non_nullable_field_is_null_field() -> None:
    """kernel_span with a null start_ns (the schema says non-nullable; IPC does not
    enforce it) was accepted; now SchemaError('null_field') naming the field."""
    b = schema.empty_batch("kernel_span")
    cols = [pa.nulls(1, f.type) for f in schema.KERNEL_SPAN]
    batch = pa.RecordBatch.from_arrays(cols, schema=b.schema)
    with pytest.raises(schema.SchemaError) as e:
        schema.decode(_ipc(batch), _headers("kernel_span"))
    assert e.value.reason == "null_field"
    assert "'" + next(f.name for f in schema.KERNEL_SPAN if not f.nullable) + "'" in str(e.value)

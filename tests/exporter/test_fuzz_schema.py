"""Fuzz: schema.decode returns a valid batch (validate(full=True), no nulls in
non-nullable fields) or SchemaError with a reason, for mutated real bus messages
(headers and Arrow IPC payload)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing.strategies import CI, check_parser
from tests.fuzzing.targets import BUS


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_bus")


@CI
@given(data=st.data())
def test_fuzz_bus_message_decode(work: Path, data: st.DataObject) -> None:
    """decode on messages of the recorded kernel/iteration/gauge batches, mutated."""
    check_parser(BUS, work, data)

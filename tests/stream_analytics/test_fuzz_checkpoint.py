"""Fuzz: checkpoint.restore gives engine and verdicts or CheckpointError for mutated
checkpoints of an engine fed with recorded kernels and of fed drift monitors (zlib
bytes, inflated JSON bytes and JSON nodes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing.strategies import CI, check_parser
from tests.fuzzing.targets import CHECKPOINT


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_checkpoint")


@pytest.mark.slow
@CI
@given(data=st.data())
def test_fuzz_checkpoint_restore(work: Path, data: st.DataObject) -> None:
    """restore on mutated checkpoints: never an exception other than CheckpointError."""
    check_parser(CHECKPOINT, work, data)

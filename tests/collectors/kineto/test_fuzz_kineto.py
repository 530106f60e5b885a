"""Fuzz: the Kineto trace follower parses a mutated real trace (plain and gzipped)
without raising; an unusable file is rejected once as bad_json naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing.strategies import CI, check_parser
from tests.fuzzing.targets import KINETO


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_kineto")


@pytest.mark.slow
@CI
@given(data=st.data())
def test_fuzz_kineto_trace(work: Path, data: st.DataObject) -> None:
    """TraceDirFollower._parse (load_json + kineto_emits + clock) on mutated traces."""
    check_parser(KINETO, work, data)

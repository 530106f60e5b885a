"""Fuzz: the GPU readers (rocm-smi JSON, amd-smi JSON, amdgpu sysfs) return rows plus
drops by reason, or ParseError for an unusable document, on mutated recorded outputs;
the rows always build a gauge_sample batch."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing.strategies import CI, check_parser
from tests.fuzzing.targets import AMD_SMI, ROCM_SMI, SYSFS


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_gpu")


@CI
@given(data=st.data())
def test_fuzz_rocm_smi_json(work: Path, data: st.DataObject) -> None:
    """parse_rocm_smi on mutated rocm-smi --json documents (8 tools' recordings)."""
    check_parser(ROCM_SMI, work / "rocm_smi", data)


@CI
@given(data=st.data())
def test_fuzz_amd_smi_json(work: Path, data: st.DataObject) -> None:
    """parse_static / parse_metric on mutated amd-smi --json documents."""
    check_parser(AMD_SMI, work / "amd_smi", data)


@pytest.mark.slow
@CI
@given(data=st.data())
def test_fuzz_sysfs_files(work: Path, data: st.DataObject) -> None:
    """read_sysfs on the sysfs tree with one file's content mutated."""
    check_parser(SYSFS, work / "sysfs", data)

"""Execution providers: --providers is checked against this onnxruntime, AMD
providers name their extra, and a visible AMD GPU with only the CPU provider
gives a warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

from collectors.ort import (
    ModelError,
    ModelRunner,
    check_providers,
    cpu_only_warning,
    gpu_present,
    load_graph,
)

ROOT = Path(__file__).resolve().parents[3]
EXE = str(Path(sys.executable).parent / "aaco-exporter")
SYSFS = ROOT / "collectors/gpu/testdata/sysfs_synthetic"


def test_an_unavailable_amd_provider_names_the_available_ones_and_its_extra() -> None:
    if "MIGraphXExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has MIGraphX")  # never on CI's CPU build
    with pytest.raises(ModelError, match=r"MIGraphXExecutionProvider.*available: .*"
                                         r"CPUExecutionProvider.*aaco-exporter\[migraphx\]"):
        check_providers(["MIGraphXExecutionProvider", "CPUExecutionProvider"])


def test_chosen_providers_are_used_in_order(magika_model: Path) -> None:
    """An available list is kept as given and the session runs on its first."""
    runner = ModelRunner(load_graph(magika_model), providers=["CPUExecutionProvider"])
    assert runner.providers == ["CPUExecutionProvider"]
    assert runner.provider == "CPUExecutionProvider"


def test_gpu_presence_comes_from_kfd_or_an_amd_drm_card(tmp_path: Path) -> None:
    """/dev/kfd, or a card with vendor 0x1002 (the synthetic sysfs tree has
    AMD card0/card2 and an NVIDIA card1), makes a GPU present; neither does not."""
    none = tmp_path / "no-kfd"
    assert gpu_present(none, SYSFS / "class/drm") is True
    assert gpu_present(none, tmp_path) is False
    (tmp_path / "kfd").touch()
    assert gpu_present(tmp_path / "kfd", tmp_path) is True


def test_cpu_only_on_a_gpu_host_is_warned() -> None:
    assert cpu_only_warning(["CPUExecutionProvider"], gpu=True) is not None
    assert cpu_only_warning(["CPUExecutionProvider"], gpu=False) is None
    assert cpu_only_warning(["MIGraphXExecutionProvider", "CPUExecutionProvider"],
                            gpu=True) is None


def test_capture_with_an_unavailable_provider_exits_2_with_one_line(tmp_path: Path) -> None:
    r = subprocess.run([EXE, "capture", "--model", "magika", "--iterations", "2", "--out",
                        str(tmp_path), "--providers", "NoSuchExecutionProvider"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "NoSuchExecutionProvider" in r.stderr and "Traceback" not in r.stderr


def test_run_providers_without_model_is_refused() -> None:
    """An observed server picks its own providers: --providers needs --model."""
    r = subprocess.run([EXE, "run", "--providers", "CPUExecutionProvider"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--model" in r.stderr

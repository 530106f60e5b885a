"""GPU gauges rendered by the Prometheus sink pass ``promtool check metrics``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from collectors.gpu import rows as R
from collectors.gpu.amd_smi import parse_metric
from collectors.gpu.rocm_smi import parse_rocm_smi
from collectors.gpu.sysfs import read_sysfs

TD = Path(__file__).parents[3] / "collectors" / "gpu" / "testdata"


@pytest.mark.apt
def test_gpu_exposition_passes_promtool_lint() -> None:
    """amd-smi, rocm-smi and sysfs rows through PromState: promtool prints nothing, rc 0."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    prom = pytest.importorskip("exporter.sinks.prometheus")
    from prometheus_client import CollectorRegistry, generate_latest

    state = prom.PromState()
    sources = [
        ("amd-smi", parse_metric((TD / "amd_smi_metric_gpu_data_synthetic.json").read_text())),
        ("rocm-smi", parse_rocm_smi((TD / "smi/wandb/mi250_rocm_smi_all_rocm6.json").read_text())),
        ("sysfs", read_sysfs(TD / "sysfs_synthetic")),
    ]
    for i, (source, res) in enumerate(sources):
        state.ingest("gauge_sample", f"node-{i}", R.to_table(res.rows, ts_ns=1, source=source))
    reg = CollectorRegistry()
    reg.register(state)
    text = generate_latest(reg)
    assert b"hw_gpu_power_watts" in text and b"hw_gpu_energy_joules_total" in text
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                         timeout=30, check=False)
    assert (out.returncode, out.stdout + out.stderr) == (0, b"")


def test_sink_keeps_gpus_with_different_resource_attributes() -> None:
    """Two GPUs, one with model/uuid/partition attributes and one without: both exported."""
    prom = pytest.importorskip("exporter.sinks.prometheus")
    state = prom.PromState()
    res = read_sysfs(TD / "sysfs_synthetic")  # card0 has uuid/model/partitions, card2 none
    state.ingest("gauge_sample", "node", R.to_table(res.rows, ts_ns=1, source="sysfs"))
    list(state.collect())
    assert state.drops.get("label_mismatch", 0) == 0

"""``benchmarks/daemon_cpu_by_function.py``: the daemon (rocm-smi double at
1 Hz, idle children, embedded nats-server) run with per-function CPU
accounting. Counts and presence are asserted, never durations."""

from __future__ import annotations

from pathlib import Path

from tests.support import ROOT, load_path


def test_every_accounted_function_exists_and_the_gpu_poll_is_counted(tmp_path: Path) -> None:
    """No target of the runner is missing (a rename would silently drop it
    from the diagnostic); over a 4 s window the GPU poll and the rocm-smi
    parse are each called at least twice (1 Hz), with some CPU each, and the
    daemon's threads used CPU."""
    bench = load_path("daemon_cpu_by_function",
                      ROOT / "benchmarks" / "daemon_cpu_by_function.py")
    rep = bench.measure(seconds=4.0, warmup=3.0, procs=2, publish_interval=None, tmp=tmp_path)
    assert rep["skipped"] == []
    funcs = rep["functions"]
    for name in ("collectors.gpu:GpuCollector.collect", "collectors.gpu.rocm_smi:parse_rocm_smi"):
        assert funcs[name]["calls_per_s"] * rep["seconds"] >= 2, (name, funcs.get(name))
        assert funcs[name]["ms_per_call"] > 0
    assert sum(rep["threads"].values()) > 0

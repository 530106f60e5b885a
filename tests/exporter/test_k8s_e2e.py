"""End to end, as root: a process placed in a cgroup whose path holds a pod UID
and a container id is watched by `aaco-exporter run`; a fake kubelet (the
real podresources v1 proto on a unix socket) gives that container GPU
0000:83:00.0. /metrics and OTLP then carry the process's pod, namespace and
container, and the GPU gauges from the rocm-smi test double carry the pod the
fake kubelet assigns to that GPU (index 1), not to GPU 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.natsserver import EmbeddedNats, free_port
from tests.collectors.k8s.fake_kubelet import FakeKubelet
from tests.support import ROOT, load_path, scrape_metrics

rx = load_path("aaco_otlp_receiver", ROOT / "tests/exporter/sinks/otlp_receiver.py")
EXE = str(Path(sys.executable).parent / "aaco-exporter")
GPU_TD = ROOT / "collectors/gpu/testdata"
POD = ("llama-0", "ml", "server")


def _v2_root() -> Path | None:
    for p in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (p / "cgroup.controllers").exists():
            return p
    return None


@pytest.fixture()
def pod_process() -> Iterator[tuple[int, str, str]]:
    """A busy-ish Python process in a containerd-style pod cgroup (cgroup v2,
    or the v1 cgroupfs-driver form on hosts without v2): (pid, pod uid, cid)."""
    uid, cid = str(uuid.uuid4()), uuid.uuid4().hex * 2
    v2 = _v2_root()
    if v2 is not None:
        base = v2 / "kubepods.slice"
        leaf = (base / "kubepods-burstable.slice" /
                f"kubepods-burstable-pod{uid.replace('-', '_')}.slice" /
                f"cri-containerd-{cid}.scope")
    else:
        base = Path("/sys/fs/cgroup/pids/kubepods")
        leaf = base / "burstable" / f"pod{uid}" / cid
    leaf.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c",
                             "import time\nwhile True:\n sum(range(20000)); time.sleep(0.005)"])
    try:
        (leaf / "cgroup.procs").write_text(str(proc.pid))
        yield proc.pid, uid, cid
    finally:
        proc.kill()
        proc.wait()
        time.sleep(0.2)
        for d in (leaf, *leaf.parents):
            if d == base.parent:
                break
            try:
                d.rmdir()
            except OSError:
                break  # another test's cgroup still there


def _config(tmp: Path, sock: Path, cid: str) -> Path:
    logs = tmp / "containers"
    logs.mkdir()
    (logs / f"{POD[0]}_{POD[1]}_{POD[2]}-{cid}.log").write_text("")
    for a in ("0000:03:00.0", "0000:83:00.0"):
        (tmp / "sys/module/amdgpu/drivers/pci:amdgpu" / a).mkdir(parents=True)
    cfg = tmp / "aaco.toml"
    cfg.write_text(f"""
[collectors.gpu]
source = "rocm-smi"
rocm_smi = "{GPU_TD / 'smi_ok_synthetic.sh'}"
interval_s = 1.0

[collectors.k8s]
socket = "{sock}"
log_dir = "{logs}"
sysfs_root = "{tmp / 'sys'}"
node_name = "node-7"
interval_s = 1.0

[otlp]
export_interval_s = 1.0
""")
    return cfg


def _ready(port: int, pid: int) -> dict[str, list[tuple[dict[str, str], float]]] | None:
    try:
        m = scrape_metrics(port)
    except OSError:
        return None
    gpus = m.get("hw_gpu_memory_usage_bytes", [])
    cpu = [lab for lab, _ in m.get("aaco_sched_cpu_seconds_total", [])
           if lab["pid"] == str(pid)]
    if any(lab.get("pod") for lab, _ in gpus) and cpu and cpu[0].get("pod"):
        return m
    return None


@pytest.mark.root
@pytest.mark.slow
def test_pod_process_and_gpu_holder_labels_on_metrics_and_otlp(
        tmp_path: Path, pod_process: tuple[int, str, str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    pid, _, cid = pod_process
    sock = tmp_path / "kubelet.sock"
    cfg = _config(tmp_path, sock, cid)
    port = free_port()
    env = {**os.environ, "SMI_FIXTURE": str(GPU_TD / "smi/rocm_smi_exporter/rocm_smi_vram.json"),
           "PYTHONPATH": str(ROOT)}
    kube = {(POD[1], POD[0], POD[2]): [("amd.com/gpu", ["0000:83:00.0"])]}
    with (FakeKubelet(sock, kube) as k,
          rx.GrpcReceiver() as receiver, EmbeddedNats(tmp_path / "nats") as srv):
        proc = subprocess.Popen(
            [EXE, "run", "--config", str(cfg), "--pid", str(pid), "--watch", "none",
             "--nats", srv.url, "--metrics-addr", f"127.0.0.1:{port}", "--otlp-endpoint",
             receiver.endpoint, "--otlp-insecure", "--log-level", "WARNING"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        try:
            deadline, m = time.monotonic() + 60, None
            while m is None and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(1)
                m = _ready(port, pid)

            def otlp_done() -> bool:
                pts = rx.metric_points(receiver.metrics)
                return any(a.get("k8s.pod.name") for a, _, _ in pts.get("hw.gpu.memory.usage", [])
                           ) and any(a.get("process.pid") == pid and a.get("k8s.pod.name")
                                     for a, _, _ in pts.get("aaco.scheduler_interference", []))
            otlp_ok = receiver.wait_for(otlp_done, timeout_s=30)
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
        assert k.calls >= 1
    assert m is not None, out.decode()[-3000:]
    # /metrics: the GPU gauges carry the holder of GPU 1 only.
    holders = {lab["gpu_index"]: (lab["pod"], lab["namespace"], lab["container"])
               for lab, _ in m["hw_gpu_memory_usage_bytes"]}
    assert holders == {"0": ("", "", ""), "1": POD}
    # /metrics: the process's series carry its pod.
    for name in ("aaco_sched_cpu_seconds_total", "aaco_watched_process_info"):
        (lab,) = [lab for lab, _ in m[name] if lab["pid"] == str(pid)]
        assert (lab["pod"], lab["namespace"], lab["container"]) == POD, name
    # OTLP: node resource; GPU 1 points and the pid's analytics points carry the pod.
    assert otlp_ok, out.decode()[-3000:]
    pts = rx.metric_points(receiver.metrics[-1:])  # the latest export: every series once
    want = dict(zip(("k8s.pod.name", "k8s.namespace.name", "k8s.container.name"), POD,
                    strict=True))
    gpu1 = [a for a, _, _ in pts["hw.gpu.memory.usage"] if a.get("aaco.gpu.index") == 1]
    gpu0 = [a for a, _, _ in pts["hw.gpu.memory.usage"] if a.get("aaco.gpu.index") == 0]
    assert gpu1 and all({key: a.get(key) for key in want} == want for a in gpu1)
    assert gpu0 and not any(a.get("k8s.pod.name") for a in gpu0)
    sii = [a for a, _, _ in pts["aaco.scheduler_interference"] if a.get("process.pid") == pid and
           a.get("k8s.pod.name")]
    assert sii and all({key: a.get(key) for key in want} == want for a in sii)
    nodes = {str(rx.attrs(rm.resource.attributes).get("k8s.node.name"))
             for req in receiver.metrics for rm in req.resource_metrics}
    assert nodes == {"node-7"}

"""The k8s collector end to end on a synthetic /proc, log directory and sysfs
with a fake kubelet: process rows (pod, namespace, container, Slurm job),
GPU rows mapped to the gpu collector's index, and drops counted once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collectors.base import CollectorContext, create
from exporter import schema
from tests.collectors.k8s.fake_kubelet import FakeKubelet

UID = "0d8e7a5c-2b1f-4c3d-9e8f-7a6b5c4d3e2f"
CID = "3f8a1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"
OTHER = "9" * 64


def _tree(tmp: Path) -> dict[str, str]:
    proc, logs, sysfs = tmp / "proc", tmp / "containers", tmp / "sys"
    cg = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
          f"{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n")
    for pid, text, env in ((4242, cg, b"PATH=/bin\0"),
                           (4343, "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n",
                            b""),
                           (4444, "0::/user.slice\n", b"SLURM_JOB_ID=91\0"),
                           (4545, f"0::/system.slice/docker-{OTHER}.scope\nbad line\n", b""),
                           (4646, "0::/user.slice\n", b"")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(text)
        (proc / str(pid) / "environ").write_bytes(env)
    logs.mkdir()
    (logs / f"llama-0_ml_server-{CID}.log").write_text("")
    (logs / "not-a-link-name.log").write_text("")
    for a in ("0000:03:00.0", "0000:83:00.0"):
        (sysfs / "module/amdgpu/drivers/pci:amdgpu" / a).mkdir(parents=True)
    (sysfs / "module/amdgpu/drivers/pci:amdgpu/module").mkdir()
    return {"proc_root": str(proc), "log_dir": str(logs), "sysfs_root": str(sysfs),
            "socket": str(tmp / "kubelet.sock"), "node_name": "node-7"}


def _rows(c: Any) -> list[dict[str, Any]]:
    (emit,) = c.collect()
    return schema.conform("k8s_attribution", emit.batch).to_pylist()  # type: ignore[no-any-return]


@pytest.fixture()
def opts(tmp_path: Path) -> dict[str, str]:
    return _tree(tmp_path)


def test_processes_and_gpus_attributed(opts: dict[str, str]) -> None:
    """Pod process named via its log link; Slurm jobs from cgroup and environ;
    the held PCI GPU maps to index 1, the NVIDIA one to its UUID; a partition
    id is unmapped; a host process without job gives no row."""
    pods = {("ml", "llama-0", "server"): [("amd.com/gpu", ["0000:83:00.0"])],
            ("ml", "other", "c"): [("nvidia.com/gpu", ["GPU-abc"]),
                                   ("amd.com/gpu", ["amdgpu_xcp_3"])]}
    logs: list[str] = []
    with FakeKubelet(Path(opts["socket"]), pods):
        c = create("k8s", CollectorContext("h", {4242, 4343, 4444, 4545, 4646}, opts,
                                           logs.append))
        rows = _rows(c)
        assert c.source == "podresources"
        rows2 = _rows(c)
    procs = {r["pid"]: r for r in rows if r["kind"] == "process"}
    assert sorted(procs) == [4242, 4343, 4444, 4545]
    p = procs[4242]
    assert (p["namespace"], p["pod"], p["container"], p["pod_uid"], p["container_id"]) == (
        "ml", "llama-0", "server", UID, CID)
    assert procs[4343]["slurm_job_id"] == "77" and procs[4444]["slurm_job_id"] == "91"
    assert procs[4545]["pod"] is None and procs[4545]["container_id"] == OTHER
    gpus = sorted(((r["gpu_index"], r["gpu_uuid"], r["pod"], r["resource"], r["device_id"])
                   for r in rows if r["kind"] == "gpu"), key=str)
    assert gpus == [(1, None, "llama-0", "amd.com/gpu", "0000:83:00.0"),
                    (None, "GPU-abc", "other", "nvidia.com/gpu", "GPU-abc")]
    assert {r["node"] for r in rows} == {"node-7"}
    assert len(rows2) == len(rows)
    # each drop once, though collected twice
    assert c.drops() == {"cgroup_bad_line": 1, "unresolved_container": 1,
                         "unmapped_device": 1, "bad_log_name": 1}


def test_missing_socket_processes_still_attributed(opts: dict[str, str]) -> None:
    """No kubelet: one log line, no GPU rows, process rows unchanged."""
    logs: list[str] = []
    c = create("k8s", CollectorContext("h", {4242}, opts, logs.append))
    rows, rows2 = _rows(c), _rows(c)
    assert [(r["kind"], r["pod"]) for r in rows] == [("process", "llama-0")] == \
        [(r["kind"], r["pod"]) for r in rows2]
    assert c.source == "cgroup"
    assert sum("pod attribution off" in m for m in logs) == 1
    assert c.drops()["podresources_missing"] >= 1


def test_exited_process_leaves_the_snapshot(opts: dict[str, str]) -> None:
    """A pid no longer watched is absent from the next snapshot."""
    ctx = CollectorContext("h", {4242, 4343}, opts, lambda m: None)
    c = create("k8s", ctx)
    assert {r["pid"] for r in _rows(c)} == {4242, 4343}
    ctx.pids.discard(4343)
    assert {r["pid"] for r in _rows(c)} == {4242}

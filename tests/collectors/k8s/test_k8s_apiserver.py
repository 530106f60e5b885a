"""The optional Kubernetes API lookup with the real `kubernetes` client against
a fake API server: this node's pods by UID and container id, the field
selector and token sent, a 403 (no RBAC) turning it off with one log line,
and the collector naming a process through it when no log link does."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import CollectorContext, create
from collectors.k8s.apiserver import PodIndex
from collectors.k8s.podresources import Holder
from exporter import schema
from tests.collectors.k8s.fake_apiserver import FakeApiServer, pod

pytest.importorskip("kubernetes")

UID = "0d8e7a5c-2b1f-4c3d-9e8f-7a6b5c4d3e2f"
CID = "3f8a1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"
PODS = [pod("ml", "llama-0", UID, "node-7", {"server": f"containerd://{CID}",
                                              "sidecar": "containerd://" + "1" * 64}),
        pod("ml", "elsewhere", "u-2", "node-8", {"c": "containerd://" + "2" * 64})]


def test_index_by_uid_and_container_id_of_this_node_only(tmp_path: Path) -> None:
    """One list call: UID -> (ns, pod), container id -> holder; the other
    node's pod is filtered by the field selector; the token is sent."""
    with FakeApiServer(PODS) as api:
        idx = PodIndex("node-7", str(api.kubeconfig(tmp_path / "kc.json")))
        assert idx.container(CID) == Holder("ml", "llama-0", "server")
        assert idx.pod(UID) == ("ml", "llama-0")
        assert idx.container("2" * 64) is None
    (path, query, auth), *_ = api.requests
    assert path == "/api/v1/pods" and query["fieldSelector"] == ["spec.nodeName=node-7"]
    assert auth == "Bearer t0k"
    assert idx.refreshes == 1  # the miss inside min_refresh_s did not list again
    assert set(idx.pods) == {UID}


def test_forbidden_is_off_with_one_log_line(tmp_path: Path) -> None:
    """HTTP 403 (no RBAC): nothing raised, error http_403, one log line."""
    logs: list[str] = []
    t = [0.0]
    with FakeApiServer(PODS, status=403) as api:
        idx = PodIndex("node-7", str(api.kubeconfig(tmp_path / "kc.json")), log=logs.append,
                       clock=lambda: t[0])
        for i in range(3):
            t[0] = i * 10.0
            assert idx.container(CID) is None
    assert idx.error is not None and idx.error.startswith("http_403")
    assert len(api.requests) == 3 and len(logs) == 1 and "http_403" in logs[0]


def test_no_credentials_outside_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """No kubeconfig and no in-cluster service: off (no_credentials), logged."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    logs: list[str] = []
    idx = PodIndex("node-7", None, log=logs.append)
    assert idx.pod(UID) is None
    assert idx.error is not None and idx.error.startswith("no_credentials") and len(logs) == 1


def test_collector_names_process_through_the_api(tmp_path: Path) -> None:
    """kube_api = true and an empty log directory: the process is named by the API."""
    proc = tmp_path / "proc/4242"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(f"0::/kubepods/burstable/pod{UID}/{CID}\n")
    (tmp_path / "logs").mkdir()
    with FakeApiServer(PODS) as api:
        opts = {"proc_root": str(tmp_path / "proc"), "log_dir": str(tmp_path / "logs"),
                "socket": str(tmp_path / "none.sock"), "node_name": "node-7", "kube_api": True,
                "kubeconfig": str(api.kubeconfig(tmp_path / "kc.json"))}
        c = create("k8s", CollectorContext("h", {4242}, opts, lambda m: None))
        (emit,) = c.collect()
    (row,) = schema.conform("k8s_attribution", emit.batch).to_pylist()
    assert (row["namespace"], row["pod"], row["container"]) == ("ml", "llama-0", "server")
    assert "unresolved_container" not in c.drops()

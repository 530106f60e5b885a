"""The pod-resources client against a fake kubelet serving the real v1 proto
over a unix socket: List mapping, GPU devices, caching and refresh, and a
missing or refusing socket turning attribution off with one log line."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from collectors.k8s.podresources import (
    Holder,
    PodResourcesCache,
    PodResourcesClient,
    PodResourcesError,
)
from tests.collectors.k8s.fake_kubelet import FakeKubelet

ROOT = Path(__file__).parents[3]
PODS = {
    ("ml", "llama-0", "server"): [("amd.com/gpu", ["0000:83:00.0", "0000:03:00.0"]),
                                  ("example.com/nic", ["eth1"])],
    ("ml", "llama-0", "sidecar"): [],
    ("batch", "train-7", "main"): [("nvidia.com/gpu",
                                    ["GPU-6f0d5c2a-0000-0000-0000-000000000001"])],
}


@pytest.fixture()
def sock(tmp_path: Path) -> Path:
    return tmp_path / "kubelet.sock"


def test_list_maps_containers_and_gpu_devices(sock: Path) -> None:
    """List: every container with its devices; GPU device ids map to holders,
    other resources are not GPUs."""
    with FakeKubelet(sock, PODS) as k:
        snap = PodResourcesClient(str(sock)).list()
    assert k.calls == 1 and snap.ok
    server = Holder("ml", "llama-0", "server")
    assert set(snap.containers) == {server, Holder("ml", "llama-0", "sidecar"),
                                    Holder("batch", "train-7", "main")}
    assert snap.devices == {
        ("amd.com/gpu", "0000:83:00.0"): server, ("amd.com/gpu", "0000:03:00.0"): server,
        ("nvidia.com/gpu", "GPU-6f0d5c2a-0000-0000-0000-000000000001"):
            Holder("batch", "train-7", "main")}
    assert ("example.com/nic", "eth1") in snap.containers[server]
    assert snap.pods() == {("ml", "llama-0"), ("batch", "train-7")}


def test_missing_socket_is_reason_missing(sock: Path) -> None:
    """No socket file: PodResourcesError(missing) naming the path."""
    with pytest.raises(PodResourcesError) as e:
        PodResourcesClient(str(sock)).list()
    assert e.value.reason == "missing" and str(sock) in str(e.value)


def test_plain_file_is_not_a_socket(sock: Path) -> None:
    """A regular file at the socket path: reason not_socket."""
    sock.write_text("")
    with pytest.raises(PodResourcesError) as e:
        PodResourcesClient(str(sock)).list()
    assert e.value.reason == "not_socket"


def test_refusing_socket_is_unavailable(sock: Path) -> None:
    """A socket nobody accepts on (bound, not listening): reason unavailable."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    try:
        with pytest.raises(PodResourcesError) as e:
            PodResourcesClient(str(sock), timeout_s=2.0).list()
        assert e.value.reason in ("unavailable", "timeout")
    finally:
        s.close()


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_cache_refreshes_on_period_and_on_demand(sock: Path) -> None:
    """get(): one List per refresh_s; stale=True refreshes after min_refresh_s
    only; a changed pod set is seen after the refresh."""
    clock = _Clock()
    with FakeKubelet(sock, dict(PODS)) as k:
        cache = PodResourcesCache(PodResourcesClient(str(sock)), refresh_s=10, min_refresh_s=1,
                                  clock=clock)
        cache.get()
        cache.get()
        cache.get(stale=True)
        assert k.calls == 1
        k.pods[("ml", "new-1", "c")] = []
        clock.t = 1.5
        assert ("ml", "new-1") in cache.get(stale=True).pods()
        clock.t = 5
        cache.get()
        assert k.calls == 2
        clock.t = 11.5
        cache.get()
        assert k.calls == 3 and cache.refreshes == 3


def test_cache_off_with_one_log_line_then_back(sock: Path) -> None:
    """Unreachable kubelet: empty snapshot, one log line for repeated failures
    of one reason, errors counted; when it serves again: on, one line."""
    clock, logs = _Clock(), []
    cache = PodResourcesCache(PodResourcesClient(str(sock)), refresh_s=1, clock=clock,
                              log=logs.append)
    for i in range(3):
        clock.t = i * 2.0
        assert not cache.get().ok
    assert cache.errors == {"missing": 3} and len(logs) == 1
    assert "pod attribution off" in logs[0] and "missing" in logs[0]
    with FakeKubelet(sock, PODS):
        clock.t = 10
        snap = cache.get()
    assert snap.ok and cache.on and len(logs) == 2 and "on" in logs[1]


def test_committed_bindings_match_grpcio_tools_output(tmp_path: Path) -> None:
    """scripts/gen_podresources.py regenerates the committed bindings byte for
    byte from the vendored api.proto (grpcio-tools at test time)."""
    pytest.importorskip("grpc_tools")
    subprocess.run([sys.executable, str(ROOT / "scripts/gen_podresources.py"), str(tmp_path)],
                   check=True)
    rel = Path("collectors/k8s/podresources_v1")
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        assert (tmp_path / rel / name).read_bytes() == (ROOT / rel / name).read_bytes(), name

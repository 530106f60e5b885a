"""A fake kubelet: the real ``v1.PodResourcesLister`` service (the vendored
podresources api.proto, compiled by grpcio-tools) served over a unix socket.

    with FakeKubelet(sock, {("ns", "pod", "ctr"): [("amd.com/gpu", ["0000:83:00.0"])]}) as k:
        ...  # k.calls counts List calls; k.pods may be replaced while serving
"""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from collectors.k8s.podresources_v1 import api_pb2, api_pb2_grpc

Pods = dict[tuple[str, str, str], list[tuple[str, list[str]]]]


def response(pods: Pods) -> Any:
    """A ``ListPodResourcesResponse`` for ``(namespace, pod, container) ->
    [(resource, device_ids)]`` (containers of one pod grouped in one message)."""
    by_pod: dict[tuple[str, str], Any] = {}
    for (ns, pod, ctr), devs in pods.items():
        pr = by_pod.get((ns, pod))
        if pr is None:
            pr = by_pod[(ns, pod)] = api_pb2.PodResources(name=pod, namespace=ns)
        c = pr.containers.add(name=ctr)
        for res, ids in devs:
            c.devices.add(resource_name=res, device_ids=ids)
    return api_pb2.ListPodResourcesResponse(pod_resources=list(by_pod.values()))


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, owner: FakeKubelet) -> None:
        self.owner = owner

    def List(self, request: Any, context: Any) -> Any:
        self.owner.calls += 1
        return response(self.owner.pods)

    def Get(self, request: Any, context: Any) -> Any:
        one = {k: v for k, v in self.owner.pods.items()
               if (k[0], k[1]) == (request.pod_namespace, request.pod_name)}
        if not one:
            context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")
        return api_pb2.GetPodResourcesResponse(pod_resources=response(one).pod_resources[0])


class FakeKubelet:
    """Serve ``pods`` on the unix socket ``path`` until :meth:`stop`."""

    def __init__(self, path: Path, pods: Pods) -> None:
        self.path, self.pods, self.calls = path, pods, 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), self.server)
        if not self.server.add_insecure_port(f"unix://{path}"):
            raise RuntimeError(f"cannot listen on {path}")

    def __enter__(self) -> FakeKubelet:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.stop(grace=None).wait()

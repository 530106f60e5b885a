"""The kubelet pod-resources API (``v1.PodResourcesLister``) over its unix socket.

The kubelet serves gRPC on ``/var/lib/kubelet/pod-resources/kubelet.sock``;
``List`` returns every pod on the node with its containers and the device
ids the device plugins gave them (``resource_name`` such as ``amd.com/gpu``,
``device_ids`` as the plugin reports them). Bindings: the vendored
``podresources_v1/api.proto`` compiled by ``scripts/gen_podresources.py``.

:class:`PodResourcesClient` makes one ``List`` call into a :class:`Snapshot`;
:class:`PodResourcesCache` refreshes it every ``refresh_s`` seconds, or
sooner (at most every ``min_refresh_s``) when asked to because a container
was not found. When the socket is missing, refuses or times out, attribution
is off: one log line says why, :meth:`PodResourcesCache.get` returns an
empty snapshot, and it retries on the next refresh (logging once more when
it comes back).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
GPU_RESOURCES = ("amd.com/gpu", "nvidia.com/gpu")
"""Device-plugin resources whose device ids are GPUs (AMD, NVIDIA)."""
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the kubelet's own limit for this API


@dataclass(frozen=True)
class Holder:
    """A container on the node: ``namespace``, ``pod`` name, ``container`` name."""

    namespace: str
    pod: str
    container: str


@dataclass
class Snapshot:
    """One ``List`` answer.

    ``containers``: every container -> its ``(resource, device_id)`` pairs
    (all resources); ``devices``: ``(resource, device_id)`` -> holder, for
    the GPU resources only; ``taken_ns``: when (Unix ns); ``ok``: False for
    the empty snapshot of an unreachable kubelet.
    """

    containers: dict[Holder, list[tuple[str, str]]] = field(default_factory=dict)
    devices: dict[tuple[str, str], Holder] = field(default_factory=dict)
    taken_ns: int = 0
    ok: bool = False

    def pods(self) -> set[tuple[str, str]]:
        """``(namespace, pod)`` of every pod in the snapshot."""
        return {(h.namespace, h.pod) for h in self.containers}


class PodResourcesError(Exception):
    """The API could not be asked. ``reason``: ``missing`` (no socket file),
    ``not_socket``, ``unavailable`` (refused / not serving), ``timeout``,
    ``rpc_error`` (any other gRPC status)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def snapshot_from(response: Any, gpu_resources: Iterable[str] = GPU_RESOURCES) -> Snapshot:
    """A :class:`Snapshot` from a ``ListPodResourcesResponse`` message.

    A device id held by two containers (a device plugin that shares GPUs)
    keeps its first holder in ``devices``; ``containers`` lists both.
    """
    gpus = set(gpu_resources)
    snap = Snapshot(taken_ns=time.time_ns(), ok=True)
    for pod in response.pod_resources:
        for c in pod.containers:
            h = Holder(pod.namespace, pod.name, c.name)
            pairs = snap.containers.setdefault(h, [])
            for dev in c.devices:
                for did in dev.device_ids:
                    pairs.append((dev.resource_name, did))
                    if dev.resource_name in gpus:
                        snap.devices.setdefault((dev.resource_name, did), h)
    return snap


class PodResourcesClient:
    """``List`` over the kubelet socket at ``socket_path`` (see the module doc).

    Raises :class:`PodResourcesError` from :meth:`list`; never anything else
    for a missing, refusing or slow kubelet.
    """

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout_s: float = 2.0,
                 gpu_resources: Iterable[str] = GPU_RESOURCES) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self.gpu_resources = tuple(gpu_resources)
        self._channel: Any = None
        self._stub: Any = None

    def _connect(self) -> Any:
        import grpc

        from collectors.k8s.podresources_v1 import api_pb2_grpc

        if self._stub is None:
            self._channel = grpc.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
            self._stub = api_pb2_grpc.PodResourcesListerStub(  # type: ignore[no-untyped-call]
                self._channel)
        return self._stub

    def list(self) -> Snapshot:
        """One ``List`` call as a :class:`Snapshot`."""
        import grpc

        from collectors.k8s.podresources_v1 import api_pb2

        try:
            mode = os.stat(self.socket_path).st_mode
        except FileNotFoundError:
            raise PodResourcesError("missing", f"{self.socket_path} does not exist") from None
        except OSError as e:
            raise PodResourcesError("unavailable", f"{self.socket_path}: {e}") from None
        if not stat.S_ISSOCK(mode):
            raise PodResourcesError("not_socket", f"{self.socket_path} is not a unix socket")
        try:
            resp = self._connect().List(api_pb2.ListPodResourcesRequest(),
                                        timeout=self.timeout_s)
        except grpc.RpcError as e:
            code = e.code() if callable(getattr(e, "code", None)) else None
            reason = {grpc.StatusCode.UNAVAILABLE: "unavailable",
                      grpc.StatusCode.DEADLINE_EXCEEDED: "timeout"}.get(code, "rpc_error")
            detail = e.details() if callable(getattr(e, "details", None)) else str(e)
            self.close()  # a fresh channel next time
            raise PodResourcesError(reason, f"{self.socket_path}: {code}: {detail}") from None
        return snapshot_from(resp, self.gpu_resources)

    def close(self) -> None:
        """Close the channel (a later :meth:`list` opens a new one)."""
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None


@dataclass
class PodResourcesCache:
    """The latest :class:`Snapshot`, refreshed on a period or on demand.

    ``lister`` is a :class:`PodResourcesClient` (or any object with
    ``list() -> Snapshot``). Thread-safe. ``errors`` counts failed refreshes
    by :attr:`PodResourcesError.reason`; ``refreshes`` counts successful ones.
    """

    lister: Any
    refresh_s: float = 10.0
    min_refresh_s: float = 1.0
    log: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    errors: dict[str, int] = field(default_factory=dict)
    refreshes: int = 0
    _snap: Snapshot = field(default_factory=Snapshot)
    _at: float | None = None
    _off_reason: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def on(self) -> bool:
        """True while the last refresh succeeded."""
        return self._snap.ok

    def get(self, stale: bool = False) -> Snapshot:
        """The snapshot, refreshed first when ``refresh_s`` has passed, or when
        ``stale`` (the caller missed a container) and ``min_refresh_s`` has."""
        with self._lock:
            now = self.clock()
            age = None if self._at is None else now - self._at
            if age is None or age >= self.refresh_s or (stale and age >= self.min_refresh_s):
                self._refresh(now)
            return self._snap

    def _refresh(self, now: float) -> None:
        self._at = now
        try:
            snap = self.lister.list()
        except PodResourcesError as e:
            self.errors[e.reason] = self.errors.get(e.reason, 0) + 1
            if self._off_reason != e.reason:
                self.log(f"k8s: pod attribution off: kubelet pod-resources API {e.reason}: {e}")
            self._off_reason = e.reason
            self._snap = Snapshot()
            return
        if self._off_reason is not None:
            self.log("k8s: kubelet pod-resources API answers again; pod attribution on")
        self._off_reason = None
        self.refreshes += 1
        self._snap = snap

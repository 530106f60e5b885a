"""Pod UID / container id -> namespace, pod, container through the Kubernetes API.

Optional (``kube_api = true``; the ``k8s-api`` extra, the official
``kubernetes`` client): lists the pods of this node,
``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``, and indexes

* ``metadata.uid`` -> ``(namespace, name)``;
* every ``status.{initContainer,container,ephemeralContainer}Statuses[].containerID``
  (``containerd://<id>``, ``cri-o://<id>``, ``docker://<id>``) -> holder.

Credentials: the in-cluster ServiceAccount (``kubeconfig`` empty), or a
kubeconfig file. RBAC: ``get``/``list`` on ``pods`` (a ClusterRole; see
``docs/kubernetes.md``). It is used where the log links do not name a
container. :meth:`PodIndex.refresh` never raises: a missing client library,
missing credentials or a refused call leaves the index as it was, sets
``error`` and is logged once per distinct reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collectors.k8s.podresources import Holder


def _cid(raw: object) -> str | None:
    """The bare id of a ``<runtime>://<id>`` container id."""
    s = str(raw or "")
    return s.split("://", 1)[1] if "://" in s else (s or None)


def index_pods(items: list[Any]) -> tuple[dict[str, tuple[str, str]], dict[str, Holder]]:
    """``(uid -> (namespace, pod), container id -> holder)`` of ``V1Pod`` objects."""
    pods: dict[str, tuple[str, str]] = {}
    containers: dict[str, Holder] = {}
    for p in items:
        md, st = p.metadata, p.status
        if md is None:
            continue
        ns, name = str(md.namespace or ""), str(md.name or "")
        if md.uid:
            pods[str(md.uid)] = (ns, name)
        for attr in ("init_container_statuses", "container_statuses",
                     "ephemeral_container_statuses"):
            for cs in (getattr(st, attr, None) or []) if st is not None else []:
                cid = _cid(cs.container_id)
                if cid:
                    containers[cid] = Holder(ns, name, str(cs.name))
    return pods, containers


@dataclass
class PodIndex:
    """This node's pods from the API server (see the module doc)."""

    node: str
    kubeconfig: str | None = None
    timeout_s: float = 5.0
    min_refresh_s: float = 5.0
    log: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    error: str | None = None
    refreshes: int = 0
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)
    containers: dict[str, Holder] = field(default_factory=dict)
    _api: Any = None
    _at: float | None = None
    _logged: set[str] = field(default_factory=set)

    def _fail(self, reason: str, detail: str) -> None:
        self.error = f"{reason}: {detail}"
        if reason not in self._logged:
            self._logged.add(reason)
            self.log(f"k8s: Kubernetes API pod lookup off ({reason}): {detail}")

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client, config  # the k8s-api extra

            if self.kubeconfig:
                api_client = config.new_client_from_config(config_file=self.kubeconfig)
            else:
                config.load_incluster_config()
                api_client = client.ApiClient()
            self._api = client.CoreV1Api(api_client)
        return self._api

    def refresh(self, force: bool = False) -> None:
        """List this node's pods, at most every ``min_refresh_s`` unless ``force``."""
        now = self.clock()
        if not force and self._at is not None and now - self._at < self.min_refresh_s:
            return
        self._at = now
        try:
            api = self._client()
        except ImportError as e:
            self._fail("no_client", f"{e} (install the k8s-api extra)")
            return
        except Exception as e:  # config errors: no token, bad kubeconfig
            self._fail("no_credentials", f"{type(e).__name__}: {e}")
            return
        try:
            resp = api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}",
                                                   _request_timeout=self.timeout_s)
        except Exception as e:  # ApiException (403 without RBAC), connection errors
            status = getattr(e, "status", None)
            self._fail(f"http_{status}" if status else "unavailable", f"{type(e).__name__}: {e}"
                       [:300])
            return
        self.pods, self.containers = index_pods(list(resp.items or []))
        self.error = None
        self.refreshes += 1

    def container(self, cid: str) -> Holder | None:
        """The holder of container ``cid``, listing again first if unknown."""
        if cid not in self.containers:
            self.refresh()
        return self.containers.get(cid)

    def pod(self, uid: str) -> tuple[str, str] | None:
        """``(namespace, pod)`` of pod ``uid``, listing again first if unknown."""
        if uid not in self.pods:
            self.refresh()
        return self.pods.get(uid)

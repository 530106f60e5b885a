"""``k8s`` collector: which pod, namespace, container or Slurm job each watched
process and each GPU belongs to.

Every ``interval_s`` (default 5 s) it

1. asks the kubelet pod-resources API (``List`` on ``socket``, cached,
   refreshed every ``refresh_s`` or sooner when a container is unknown;
   :mod:`collectors.k8s.podresources`) which container holds which
   ``amd.com/gpu`` / ``nvidia.com/gpu`` device, and maps each device id to
   the ``gpu`` collector's GPU index or UUID (:mod:`collectors.k8s.devices`,
   ``sysfs_root``);
2. reads ``/proc/PID/cgroup`` of each watched pid (``ctx.pids``;
   :mod:`collectors.k8s.cgroup`) for the pod UID, container id and Slurm
   job id, and ``SLURM_JOB_ID`` from ``/proc/PID/environ`` where it may;
3. names the container from the kubelet's log links in ``log_dir``
   (:mod:`collectors.k8s.names`), else, with ``kube_api = true``, from the
   Kubernetes API (:mod:`collectors.k8s.apiserver`: this node's pods by UID
   and container id; the ``k8s-api`` extra, RBAC ``list pods``);

and emits the whole set as one ``k8s_attribution`` batch
(:data:`exporter.schema.K8S_ATTRIBUTION`). The sinks put ``pod``,
``namespace``, ``container`` (and ``slurm_job_id``) labels on the series of
those pids and GPUs.

Options (``[collectors.k8s]``, see ``sample.toml``): ``socket``,
``refresh_s`` (10), ``timeout_s`` (2), ``log_dir``, ``sysfs_root``
(``/sys``), ``proc_root`` (``/proc``), ``node_name`` (default ``$NODE_NAME``,
else the host), ``resources`` (GPU resource names), ``kube_api`` (false),
``kubeconfig`` (empty: in-cluster ServiceAccount), ``interval_s`` (5).

A missing or refusing kubelet socket turns GPU attribution off with one log
line (it retries each refresh); process attribution from cgroups and log
links goes on. ``drops()``: ``cgroup_bad_line`` / ``cgroup_bad_hierarchy_id``
/ ``cgroup_bad_path`` (per process, once), ``unresolved_container`` (a
container id with no log link, once per process), ``unmapped_device`` (a
GPU device id that names no GPU here, once per id), ``bad_log_name``,
``podresources_<reason>`` (failed ``List`` calls).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from collectors.base import CollectorContext, Emit, OptionType, register
from collectors.k8s.apiserver import PodIndex
from collectors.k8s.cgroup import Identity, parse_cgroup
from collectors.k8s.devices import amdgpu_addresses, gpu_key
from collectors.k8s.names import DEFAULT_LOG_DIR, LogNames
from collectors.k8s.podresources import (
    DEFAULT_SOCKET,
    GPU_RESOURCES,
    Holder,
    PodResourcesCache,
    PodResourcesClient,
)
from exporter import schema

__all__ = ["K8sCollector", "ProcessAttribution", "slurm_job_from_environ"]


@dataclass(frozen=True)
class ProcessAttribution:
    """One process: its cgroup identity, the container holding it (if named)."""

    pid: int
    identity: Identity
    holder: Holder | None
    slurm_job_id: str | None


def slurm_job_from_environ(data: bytes) -> str | None:
    """``SLURM_JOB_ID`` from the NUL-separated bytes of ``/proc/PID/environ``.

    >>> slurm_job_from_environ(b"A=1\\x00SLURM_JOB_ID=4242\\x00")
    '4242'
    >>> slurm_job_from_environ(b"SLURM_JOB_ID=x1\\x00") is None
    True
    """
    for item in data.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            v = item[len(b"SLURM_JOB_ID="):].decode("ascii", "replace")
            return v if v.isdigit() else None
    return None


@register("k8s")
class K8sCollector:
    """See the module doc."""

    name = "k8s"
    OPTIONS: ClassVar[Mapping[str, OptionType]] = {
        "socket": str, "refresh_s": float, "timeout_s": float, "log_dir": str,
        "sysfs_root": str, "proc_root": str, "node_name": str, "resources": list,
        "kube_api": bool, "kubeconfig": str, "interval_s": float}
    """Config keys (``[collectors.k8s]``) and their types; see ``sample.toml``."""

    def __init__(self, ctx: CollectorContext) -> None:
        o = ctx.options
        self.ctx = ctx
        self.interval_s = float(o.get("interval_s", 5.0))
        self.proc_root = str(o.get("proc_root", "/proc"))
        self.sysfs_root = str(o.get("sysfs_root", "/sys"))
        self.node = str(o.get("node_name") or os.environ.get("NODE_NAME") or ctx.host)
        resources = tuple(str(r) for r in o.get("resources", GPU_RESOURCES))
        self.client = PodResourcesClient(str(o.get("socket", DEFAULT_SOCKET)),
                                         float(o.get("timeout_s", 2.0)), resources)
        self.cache = PodResourcesCache(self.client, float(o.get("refresh_s", 10.0)),
                                       log=ctx.log)
        self.names = LogNames(str(o.get("log_dir", DEFAULT_LOG_DIR)))
        self.api = (PodIndex(self.node, str(o.get("kubeconfig") or "") or None,
                             log=ctx.log) if o.get("kube_api", False) else None)
        self._drops: Counter[str] = Counter()
        self._ident: dict[int, tuple[int, Identity]] = {}  # pid -> (start ticks, identity)
        self._unresolved: set[int] = set()
        self._unmapped: set[str] = set()
        self._names_error_logged = False
        self._stale = False
        self._seq = itertools.count()
        self._run = f"k8s-{ctx.host}-{uuid.uuid4().hex[:12]}"
        self.processes: dict[int, ProcessAttribution] = {}
        self.gpus: dict[tuple[str, str], tuple[str, str, Holder]] = {}
        self.source = "cgroup"  # "podresources" while the kubelet answers

    # -- per process -------------------------------------------------------
    def _start_ticks(self, pid: int) -> int:
        try:
            with open(f"{self.proc_root}/{pid}/stat", "rb") as f:
                stat = f.read()
            return int(stat.rsplit(b")", 1)[1].split()[19])  # field 22: starttime
        except (OSError, IndexError, ValueError):
            return -1

    def _identity(self, pid: int) -> Identity | None:
        start = self._start_ticks(pid)
        hit = self._ident.get(pid)
        if hit is not None and hit[0] == start:
            return hit[1]
        path = f"{self.proc_root}/{pid}/cgroup"
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            return None  # exited, or not ours to read
        parsed = parse_cgroup(text, path)
        for reason, n in parsed.drops.items():
            self._drops[f"cgroup_{reason}"] += n
        for msg in parsed.errors[:1]:
            self.ctx.log(f"k8s: {msg}")
        self._ident[pid] = (start, parsed.identity)
        return parsed.identity

    def _slurm_env(self, pid: int) -> str | None:
        try:
            with open(f"{self.proc_root}/{pid}/environ", "rb") as f:
                return slurm_job_from_environ(f.read())
        except OSError:
            return None

    def _process(self, pid: int) -> ProcessAttribution | None:
        ident = self._identity(pid)
        if ident is None:
            return None
        job = ident.slurm_job_id or self._slurm_env(pid)
        holder = self._holder(pid, ident)
        if not (ident or job):
            return None
        return ProcessAttribution(pid, ident, holder, job)

    def _holder(self, pid: int, ident: Identity) -> Holder | None:
        """Log links first, then the Kubernetes API (when on); a container id
        nobody names is counted once per process."""
        cid, holder = ident.container_id, None
        if cid:
            holder = self.names.get(cid)
            if holder is None and pid not in self._unresolved:
                holder = self.names.get(cid, rescan=True)
            if holder is None and self.api is not None:
                holder = self.api.container(cid)
        if holder is None and ident.pod_uid and self.api is not None:
            got = self.api.pod(ident.pod_uid)  # the pod is known, its container not
            holder = Holder(got[0], got[1], "") if got else None
        if holder is None and cid and pid not in self._unresolved:
            self._unresolved.add(pid)
            self._drops["unresolved_container"] += 1
            self._stale = True
        return holder

    # -- collect -------------------------------------------------------------
    def collect(self) -> Iterable[Emit]:
        """Attribute the watched pids and the held GPUs; emit the snapshot."""
        snap = self.cache.get(stale=self._stale)
        self._stale = False
        self.source = "podresources" if snap.ok else "cgroup"
        pids = sorted(self.ctx.pids)
        procs = {}
        for pid in pids:
            a = self._process(pid)
            if a is not None:
                procs[pid] = a
        if self.names.error and not self._names_error_logged:
            self._names_error_logged = True
            self.ctx.log(f"k8s: container names unavailable ({self.names.error}); "
                         "processes get pod_uid/container_id only")
        alive = set(pids)
        self._ident = {p: v for p, v in self._ident.items() if p in alive}
        self._unresolved &= alive
        self.processes = procs
        addresses = amdgpu_addresses(self.sysfs_root) if snap.devices else []
        gpus: dict[tuple[str, str], tuple[str, str, Holder]] = {}
        for (resource, did), holder in sorted(snap.devices.items()):
            key = gpu_key(did, addresses)
            if key is None:
                if did not in self._unmapped:
                    self._unmapped.add(did)
                    self._drops["unmapped_device"] += 1
                continue
            gpus.setdefault(key, (resource, did, holder))
        self.gpus = gpus
        return [Emit("k8s_attribution", self._table(), f"{self._run}:{next(self._seq)}")]

    def _table(self) -> pa.Table:
        rows: list[dict[str, Any]] = []
        for a in self.processes.values():
            h = a.holder
            rows.append({"kind": "process", "pid": a.pid,
                         "namespace": h.namespace if h else None, "pod": h.pod if h else None,
                         "container": h.container if h else None,
                         "pod_uid": a.identity.pod_uid, "container_id": a.identity.container_id,
                         "slurm_job_id": a.slurm_job_id})
        for (kind, val), (resource, did, h) in self.gpus.items():
            rows.append({"kind": "gpu", "gpu_index": int(val) if kind == "index" else None,
                         "gpu_uuid": val if kind == "uuid" else None, "device_id": did,
                         "resource": resource, "namespace": h.namespace, "pod": h.pod,
                         "container": h.container})
        now = time.time_ns()
        cols: dict[str, list[Any]] = {f.name: [] for f in schema.K8S_ATTRIBUTION}
        for r in rows:
            r.update(ts_ns=now, node=self.node)
            for k in cols:
                cols[k].append(r.get(k))
        return pa.table(cols, schema=schema.K8S_ATTRIBUTION)

    def drops(self) -> dict[str, int]:
        """What could not be attributed, by reason (see the module doc)."""
        out = Counter(self._drops)
        out.update(self.names.drops)
        out.update({f"podresources_{k}": v for k, v in self.cache.errors.items()})
        return dict(out)

    def close(self) -> None:
        """Close the kubelet channel."""
        self.client.close()

"""Process -> container -> pod (and Slurm job) from ``/proc/PID/cgroup``.

``/proc/PID/cgroup`` holds one line per hierarchy, ``ID:CONTROLLERS:PATH``
(``cgroups(7)``): cgroup v2 has the single line ``0::/path``; v1 has
``N:ctrl[,ctrl]:/path`` per mounted hierarchy (plus ``N:name=systemd:/path``).
The path forms recognised, segment by segment (see
``collectors/k8s/testdata/PROVENANCE.md`` for where each is documented):

==============================================  =====================================
segment                                          gives
==============================================  =====================================
``kubepods[-<qos>]-pod<uid>.slice``              pod UID (systemd driver; ``_`` -> ``-``)
``pod<uid>`` (below ``kubepods``)                pod UID (cgroupfs driver)
``cri-containerd-<id>.scope``                    container id, runtime ``containerd``
``crio-<id>.scope``                              container id, runtime ``cri-o``
``crio-conmon-<id>.scope``                       CRI-O's monitor: no container id
``docker-<id>.scope``                            container id, runtime ``docker``
``<id>`` after ``pod<uid>`` or ``docker``         container id (cgroupfs driver)
``job_<n>`` below ``slurm`` / ``*slurmstepd.scope``   Slurm job id
==============================================  =====================================

A container id is 64 lower-case hex digits (what containerd, CRI-O and
Docker use). The cgroup v2 line wins over v1 lines; among v1 lines the
first that yields anything is used.

Errors: nothing raises on bad content. A line without two ``:``, with a
non-numeric hierarchy id, or with a relative path is skipped and counted
in :attr:`Parsed.drops` by reason (``bad_line``, ``bad_hierarchy_id``,
``bad_path``), with one message naming the line in :attr:`Parsed.errors`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_UID = r"[0-9a-fA-F][0-9a-fA-F_-]{30,35}"
_SLICE_POD = re.compile(rf"^kubepods(?:-[a-z]+)?-pod({_UID})\.slice$")
_FS_POD = re.compile(rf"^pod({_UID})$")
_ID = r"[0-9a-f]{64}"
_SCOPE = re.compile(rf"^(cri-containerd|crio-conmon|crio|docker|libpod)-({_ID})\.scope$")
_BARE_ID = re.compile(rf"^{_ID}$")
_JOB = re.compile(r"^job_(\d+)$")
RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "crio-conmon": "cri-o",
            "docker": "docker", "libpod": "podman"}
"""Scope prefix -> container runtime name."""


@dataclass(frozen=True)
class Identity:
    """What one process's cgroup path says about it; every field may be None.

    ``pod_uid`` is the Kubernetes pod UID in its API form (dashes);
    ``container_id`` the runtime's 64-hex id; ``runtime`` ``containerd``,
    ``cri-o``, ``docker``, ``podman`` or ``cgroupfs`` (id from a bare
    directory name); ``slurm_job_id`` the decimal Slurm job id.
    """

    pod_uid: str | None = None
    container_id: str | None = None
    runtime: str | None = None
    slurm_job_id: str | None = None

    def __bool__(self) -> bool:
        return any((self.pod_uid, self.container_id, self.slurm_job_id))


@dataclass
class Parsed:
    """:func:`parse_cgroup`'s result: the identity plus skipped lines."""

    identity: Identity = field(default_factory=Identity)
    paths: list[tuple[str, str]] = field(default_factory=list)  # (controllers, path)
    drops: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)


def path_identity(path: str) -> Identity:
    """The identity in one cgroup path (see the module table).

    >>> path_identity("/kubepods.slice/kubepods-burstable.slice/"
    ...     "kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/"
    ...     "cri-containerd-" + "ab" * 32 + ".scope").pod_uid
    '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0'
    >>> path_identity("/slurm/uid_1000/job_42/step_0/task_0").slurm_job_id
    '42'
    """
    segs = [s for s in path.split("/") if s]
    pod = cid = runtime = job = None
    in_kubepods = in_slurm = False
    prev_pod_or_docker = False
    for seg in segs:
        if seg.startswith("kubepods"):
            in_kubepods = True
        if seg == "slurm" or seg.endswith("slurmstepd.scope"):
            in_slurm = True
        m = _SLICE_POD.match(seg)
        if m:
            pod = m.group(1).replace("_", "-")
            prev_pod_or_docker = False
            continue
        m = _FS_POD.match(seg)
        if m and in_kubepods:
            pod = m.group(1).replace("_", "-")
            prev_pod_or_docker = True
            continue
        m = _SCOPE.match(seg)
        if m:
            runtime = RUNTIMES[m.group(1)]
            cid = None if m.group(1) == "crio-conmon" else m.group(2)
            prev_pod_or_docker = False
            continue
        if prev_pod_or_docker and _BARE_ID.match(seg):
            cid, runtime = seg, "docker" if segs[0] == "docker" and pod is None else "cgroupfs"
            prev_pod_or_docker = False
            continue
        m = _JOB.match(seg)
        if m and in_slurm:
            job = m.group(1)
        prev_pod_or_docker = seg == "docker"
    return Identity(pod, cid, runtime, job)


def parse_cgroup(text: str, where: str = "cgroup") -> Parsed:
    """Parse the contents of one ``/proc/PID/cgroup`` file.

    ``where`` names the file in error messages (``/proc/42/cgroup``).

    >>> p = parse_cgroup("0::/system.slice/docker-" + "c" * 64 + ".scope\\nbogus\\n")
    >>> (p.identity.runtime, p.identity.container_id[:4], dict(p.drops))
    ('docker', 'cccc', {'bad_line': 1})
    """
    out = Parsed()
    v2: list[str] = []
    v1: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            out.drops["bad_line"] += 1
            out.errors.append(f"{where}:{n}: not ID:CONTROLLERS:PATH: {line[:80]!r}")
            continue
        hid, ctrls, path = parts
        if not hid.isdigit():
            out.drops["bad_hierarchy_id"] += 1
            out.errors.append(f"{where}:{n}: hierarchy id {hid[:20]!r} is not a number")
            continue
        if not path.startswith("/"):
            out.drops["bad_path"] += 1
            out.errors.append(f"{where}:{n}: path {path[:80]!r} is not absolute")
            continue
        out.paths.append((ctrls, path))
        (v2 if hid == "0" and ctrls == "" else v1).append(path)
    for path in v2 + v1:
        ident = path_identity(path)
        if ident:
            out.identity = ident
            break
    return out

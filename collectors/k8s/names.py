"""Container id -> (namespace, pod, container) from the kubelet's log links.

The kubelet links every container's log as
``/var/log/containers/<pod>_<namespace>_<container>-<container id>.log``
(kubernetes ``pkg/kubelet/kuberuntime``: ``legacyLogSymlink`` /
``logSymlink``, ``"%s_%s-%s"`` of the pod full name ``<pod>_<namespace>``,
the container name and the id). Pod and namespace names are DNS labels or
subdomains and container names DNS labels, so none holds ``_``; the id is
the part after the last ``-``. Log shippers (Fluent Bit's ``kubernetes``
filter, Vector, Beats) read the same names. Reading them needs only a
read-only ``hostPath`` mount of ``/var/log/containers`` (the links point
into ``/var/log/pods``; only their names are read), no API access.

:class:`LogNames` rescans the directory when its mtime changed (a container
started or was removed) or when asked to. Names that do not have that shape
are skipped and counted in ``drops["bad_log_name"]`` once each.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field

from collectors.k8s.podresources import Holder

DEFAULT_LOG_DIR = "/var/log/containers"
_NAME = re.compile(r"^([a-z0-9][a-z0-9.-]*)_([a-z0-9][a-z0-9-]*)_([a-z0-9][a-z0-9-]*)-"
                   r"([0-9a-f]{64})\.log$")


def parse_log_name(name: str) -> tuple[str, Holder] | None:
    """``(container_id, holder)`` from one link name, or None.

    >>> cid, h = parse_log_name("llama-0_ml_server-" + "ab" * 32 + ".log")
    >>> (cid[:4], h)
    ('abab', Holder(namespace='ml', pod='llama-0', container='server'))
    """
    m = _NAME.match(name)
    if m is None:
        return None
    return m.group(4), Holder(m.group(2), m.group(1), m.group(3))


@dataclass
class LogNames:
    """Index of ``log_dir`` (see the module doc). :meth:`get` never raises; a
    missing or unreadable directory is an empty index (``error`` says why)."""

    log_dir: str = DEFAULT_LOG_DIR
    drops: Counter[str] = field(default_factory=Counter)
    error: str | None = None
    _index: dict[str, Holder] = field(default_factory=dict)
    _mtime_ns: int | None = None
    _bad: set[str] = field(default_factory=set)

    def get(self, container_id: str, rescan: bool = False) -> Holder | None:
        """The holder of ``container_id``; rescans first when the directory
        changed or ``rescan``."""
        self._maybe_scan(rescan)
        return self._index.get(container_id)

    def _maybe_scan(self, force: bool) -> None:
        try:
            mtime = os.stat(self.log_dir).st_mtime_ns
        except OSError as e:
            self.error, self._index, self._mtime_ns = f"{self.log_dir}: {e.strerror}", {}, None
            return
        if not force and mtime == self._mtime_ns:
            return
        try:
            names = os.listdir(self.log_dir)
        except OSError as e:
            self.error, self._index = f"{self.log_dir}: {e.strerror}", {}
            return
        self.error, self._mtime_ns = None, mtime
        index: dict[str, Holder] = {}
        for n in names:
            got = parse_log_name(n)
            if got is None:
                if n not in self._bad:
                    self._bad.add(n)
                    self.drops["bad_log_name"] += 1
                continue
            index[got[0]] = got[1]
        self._bad &= set(names)  # bounded: forget names that are gone
        self._index = index

"""Helpers shared by tests (import as ``tests.support``; not a test module)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_path(name: str, path: Path) -> ModuleType:
    """Import the file ``path`` as module ``name`` (once; cached in sys.modules).

    For scripts that are not packages: ``dashboards/generate.py``,
    ``benchmarks/*.py`` and test data helpers.
    """
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def make_pki(d: Path) -> dict[str, Path]:
    """A test CA plus a server cert (SAN 127.0.0.1, localhost) and a client cert,
    made with the ``openssl`` CLI into ``d``."""
    d.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=aaco test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, eku, san in (("server", "serverAuth", "IP:127.0.0.1,DNS:localhost"),
                           ("client", "clientAuth", "DNS:aaco-client")):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN={name}")
        (d / f"{name}.ext").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage={eku}\nsubjectKeyIdentifier=hash\n"
            f"authorityKeyIdentifier=keyid\nsubjectAltName={san}\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                "-extfile", f"{name}.ext")
    return {n: d / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def die_with_parent() -> None:
    """``preexec_fn`` for a busy child: the kernel kills it (SIGKILL) when the
    thread that started it exits (``prctl(PR_SET_PDEATHSIG)``: start it from
    pytest's main thread, not from a worker that ends first), so a test run
    killed from outside leaves no CPU hog behind to slow what runs next."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM ``proc`` and wait up to ``timeout`` s; SIGKILL it if it is still up."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def scrape_metrics(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``/metrics`` on 127.0.0.1:``port``, parsed: sample name -> [(labels, value)]."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    bad = uncatalogued(out)
    assert not bad, f"/metrics serves series exporter/catalogue.py does not list: {bad}"
    return out


def uncatalogued(samples: dict[str, list[tuple[dict[str, str], float]]]) -> list[str]:
    """``aaco_*``/``hw_gpu_*`` sample names (with a label set) that the metric
    catalogue does not list, or that carry a label the catalogue does not name
    for them. GPU gauges may add their attributes as labels; those are free."""
    from exporter import catalogue

    bad: list[str] = []
    for name, points in samples.items():
        if not name.startswith(("aaco_", "hw_gpu_")):
            continue
        m = catalogue.BY_PROM.get(name)
        if m is None:
            for suffix, kinds in (("_bucket", ("histogram",)), ("_sum", ("histogram",)),
                                  ("_count", ("histogram",)), ("_created", ("histogram",))):
                base = catalogue.BY_PROM.get(name.removesuffix(suffix))
                if name.endswith(suffix) and base is not None and base.kind in kinds:
                    m = base
                    break
            if m is None and name.endswith("_created"):
                m = catalogue.BY_PROM.get(name.removesuffix("_created") + "_total")
        if m is None:
            bad.append(name)
            continue
        if m.otel.startswith("hw.gpu."):
            continue
        allowed = set(m.labels) | set(m.optional_labels) | {"le"}
        for labels, _ in points:
            if set(labels) - allowed:
                bad.append(f"{name}{sorted(set(labels) - allowed)}")
                break
    return bad


def synthetic_kernel_spans(n: int, t0: int = 0, step: int = 1, duration: int = 1,
                           **cols: Any) -> Any:
    """``n`` synthetic GPU kernel spans (a ``KERNEL_SPAN`` table): start
    ``t0 + i * step`` ns, ``duration`` ns long, pid 42, agent 1, queue 0,
    source rocprofv3, family gemm, name ``k``; ``cols`` (name -> values)
    replace columns."""
    import pyarrow as pa

    from exporter.schema import KERNEL_SPAN

    start = [t0 + i * step for i in range(n)]
    base: dict[str, Any] = {f.name: pa.nulls(n, f.type) for f in KERNEL_SPAN}
    base |= {"start_ns": start, "end_ns": [s + duration for s in start],
             "duration_ns": [duration] * n, "pid": [42] * n, "agent_id": [1] * n,
             "queue_id": [0] * n, "source": ["rocprofv3"] * n, "device_type": ["gpu"] * n,
             "kernel_family": ["gemm"] * n, "kernel_name": ["k"] * n}
    base |= cols
    arrays = {k: v if isinstance(v, pa.Array) else pa.array(v, KERNEL_SPAN.field(k).type)
              for k, v in base.items()}
    return pa.table(arrays).cast(KERNEL_SPAN)

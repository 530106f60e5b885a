"""End to end: the real daemon scraped by a real Prometheus that loads the repo's rules.

The test starts ``aaco-exporter run --model magika`` (real ONNX Runtime, real
sched and gpu collectors, embedded NATS, analytics with a 10 s window) and a
Debian ``prometheus`` that scrapes it every second and evaluates
``deploy/prometheus/rules/*.yml``.  Once Prometheus holds the analytics series
and every rule group has been evaluated on them, every Grafana panel query,
every dashboard variable query, every recording-rule expression and the metric
selectors of every alert are sent to ``/api/v1/query``.  A query that matches
no series is a defect (a wrong metric or label name in a query, or a series the
exporter does not produce) unless the query needs a source this run lacks.

GPU: there is no AMD GPU on CI, so ``tests/deploy/bin/`` goes first on the
daemon's PATH.  It holds ``rocm-smi``, a TEST DOUBLE that replays real recorded
``rocm-smi --json`` output (collectors/gpu/testdata/smi/, see its PROVENANCE.md):
two Radeon AI PRO R9700 cards (card1 throttled at its 300 W cap), an MI250 GCD
and an MI100.  Each card's readings are real; the combination is not one
machine.  The gpu collector's ``auto`` detection picks it (the test checks
``aaco_collector_up{collector="gpu", source="rocm-smi"}``), so every GPU panel
(``GPU_REASON`` in dashboards/generate.py), the ``$gpu`` variable and the GPU
alert selectors must return data; only ECC and throttle residency
(``GPU_ECC_REASON``, ``GPU_RESIDENCY_REASON``), which rocm-smi does not report and
no real recording holds, may be empty.  The replayed card1 at its power cap puts
``AacoGpuPowerHigh`` in ``pending`` (its ``for`` is 10 m), so the ALERTS panel must
have data as well.

eBPF: when the daemon's sched collector reports the ``ebpf`` source (root with
bcc, as on CI) the runqueue latency panel must have data; with the /proc source
it may be empty.

Kubernetes: the ``k8s`` collector runs against a fake kubelet (the real
podresources v1 proto on a unix socket) that gives container ``server`` of pod
``ml/magika-0`` GPU ``0000:03:00.0`` (index 0 of a synthetic amdgpu sysfs
list), a log-link directory naming that container, and a synthetic
``proc_root`` whose ``<daemon pid>/cgroup`` puts the daemon (which runs the
model) in that container. So the ``namespace`` and ``pod`` dashboard variables
and the per-namespace alert's selectors must return data too.

LLM: a real generate loop (the arabic-name-romanizer GRU encoder-decoder, the
``models`` extra) runs under ``aaco-exporter instrument`` for the whole test,
publishing its finished generate calls to the daemon's embedded NATS (on an
ephemeral port), so the "LLM generate loops" panels must return data as well.
Its encoder and decoder ONNX sessions are two models of one pid, which the
daemon watches (``--pid``), so the scheduler panels' pid -> model join must
give that pid once per model (a join that needs one model per pid fails with
"many-to-many matching not allowed").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.collectors.k8s.fake_kubelet import FakeKubelet
from tests.support import load_path

REPO = Path(__file__).resolve().parents[2]
#: Holds ``rocm-smi``, the test double that replays recorded rocm-smi JSON.
TEST_DOUBLE_BIN = Path(__file__).resolve().parent / "bin"
RULE_FILES = sorted((REPO / "deploy" / "prometheus" / "rules").glob("*.yml"))
JOB = "aaco-exporter"

#: Panel variables: a short rate window, so 1 s scrapes give many samples in ~40 s.
VARIABLES = {"__rate_interval": "15s", "__interval": "15s"}

#: Series the analytics consumer publishes after its first window; the daemon is
#: "warm" once all of them are on /metrics.
ANALYTICS_SERIES = (
    "aaco_kernel_amplification_ratio",
    "aaco_launch_tax_ratio",
    "aaco_scheduler_interference_ratio",
    "aaco_gpu_active_ratio",
    "aaco_iteration_latency_seconds",
    "aaco_graph_nodes",
    "aaco_bottleneck_info",
    "aaco_bottleneck_confidence",
    "aaco_drift_detected",
)

#: Families the generate loop's calls give once the daemon has folded some.
LLM_SERIES = ("aaco_llm_time_to_first_token_seconds_bucket", "aaco_llm_output_tokens_total")

#: A generate loop that knows nothing of the bus: one call every 0.2 s, batch 1 or 4,
#: until it is stopped (the instrumentation publishes its calls).
LLM_LOOP = """
import itertools, time
from pathlib import Path
import arabic_name_romanizer.inference as R
from exporter.instrument.llm import generate_span
names = ["محمد", "فاطمة", "يوسف", "مريم"]
model = R.OnnxModel(Path(R.__file__).parent / "resources", beam_width=2, dedupe=False,
                    intra_op_threads=1)
for bs in itertools.cycle((1, 4)):
    with generate_span("romanizer", batch_size=bs, step_session=model.backend.decoder):
        model.transliterate_units(names[:bs], None, 1)
    time.sleep(0.2)
"""

#: (host, pid) of the processes with more than one model (the generate loop's encoder and
#: decoder sessions): the scheduler panels must show each of its models.
TWO_MODEL_PIDS = "count by (host, pid) (group by (host, pid, model) (aaco_graph_nodes)) > 1"

#: The replayed card at its power cap (300 W of 300 W): AacoGpuPowerHigh goes pending.
POWER_CAPPED_GPU = "1"

PROMQL_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
        "group_right", "offset", "bool", "inf", "nan", "atan2",
        # aggregation operators: `max by (x) (...)` is not followed by "(" directly
        "sum", "min", "max", "avg", "group", "count", "stddev", "stdvar", "topk",
        "bottomk", "quantile", "count_values",
    }
)  # fmt: skip


def _load_generator() -> ModuleType:
    return load_path("aaco_dashboards_generate_e2e", REPO / "dashboards" / "generate.py")


def _rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules.extend(group["rules"])
    return rules


def _selectors(expr: str) -> list[str]:
    """The vector selectors of a PromQL expression (``name`` or ``name{matchers}``).

    >>> _selectors('max by (host) (a_b{x="1", y=~"p|q"}) > 0.2 unless on (host) c:d offset 1h')
    ['a_b{x="1", y=~"p|q"}', 'c:d']
    >>> _selectors('sum(rate(foo_total[5m])) or vector(0)')
    ['foo_total']
    >>> _selectors('group by (host) ({__name__=~"aaco_.+", host!=""})')
    ['{__name__=~"aaco_.+", host!=""}']
    """
    found: list[str] = []
    # Strings, range/subquery brackets and label lists of by/on/... can hold identifiers.
    text = re.sub(r"\[[^\]]*\]", "", expr)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text)
    token = re.compile(
        r'"(?:[^"\\]|\\.)*"'  # a string literal outside a selector
        r"|(?P<bare>\{[^}]*\})"  # a selector without a metric name
        r"|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?P<labels>\{[^}]*\})?(?P<call>\s*\()?"
        r"|\d+(?:\.\d+)?[smhdwy]?"
    )
    for m in token.finditer(text):
        if m.group("bare"):
            found.append(m.group("bare"))
            continue
        name = m.group("name")
        if name is None or m.group("call") or name in PROMQL_KEYWORDS:
            continue
        found.append(name + (m.group("labels") or ""))
    return found


def _metric_name(selector: str) -> str:
    return selector.split("{", 1)[0]


def _positive(selector: str) -> str:
    """``selector`` without its negative matchers (``!=``, ``!~``).

    Negative matchers exclude the healthy state (e.g. ``class!~"compute_bound"``),
    so on a healthy machine they may rightly match nothing; the metric must exist.

    >>> _positive('m{class!~"unknown|x", host="h"}')
    'm{host="h"}'
    >>> _positive('m{a!="b"}')
    'm'
    """
    name, _, rest = selector.partition("{")
    if not rest:
        return selector
    matchers = re.findall(r'[a-zA-Z_]\w*\s*(?:!=|!~|=~|=)\s*"(?:[^"\\]|\\.)*"', rest)
    keep = [m for m in matchers if not re.match(r"[a-zA-Z_]\w*\s*!", m)]
    return name + ("{" + ", ".join(keep) + "}" if keep else "")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


class Prom:
    """A minimal client for the Prometheus HTTP API."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.at: float | None = None
        """Unix time every instant query is evaluated at; ``None``: now."""

    def api(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.base}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            body = _get(url)
        except urllib.error.HTTPError as exc:  # 400/422: bad query, body says why
            body = exc.read()
        doc: dict[str, Any] = json.loads(body)
        return doc

    def query(self, expr: str, at: float | None = None) -> tuple[list[dict[str, Any]] | None, str]:
        """Instant query at ``at`` (default :attr:`at`, else now): (result, "")
        on success, (None, error) on failure."""
        t = at if at is not None else self.at
        doc = self.api("query", query=expr, **({"time": f"{t:.3f}"} if t is not None else {}))
        if doc.get("status") != "success":
            return None, f"{doc.get('errorType')}: {doc.get('error')}"
        data = doc["data"]
        if data["resultType"] in ("scalar", "string"):
            return [{"value": data["result"]}], ""
        result: list[dict[str, Any]] = data["result"]
        return result, ""


def _stop(proc: subprocess.Popen[bytes], name: str) -> None:
    """SIGTERM the process (a session leader), then SIGKILL its whole process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
    with suppress(ProcessLookupError):  # children (embedded nats-server) left behind
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait(timeout=10)
    assert proc.returncode is not None, f"{name} still running"


@contextmanager
def _process(
    argv: list[str], log: Path, name: str, env_extra: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            yield proc
        finally:
            _stop(proc, name)


def _wait(what: str, cond: Callable[[], object], timeout: float, log: Path | None = None) -> float:
    """Poll ``cond()`` every 0.5 s until truthy; return the time it became so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return time.time()
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")


K8S_CID = "5e" * 32
K8S_UID = "4b1d2c3e-5f60-4a7b-8c9d-0e1f2a3b4c5d"


def _k8s_config(tmp: Path) -> tuple[Path, Path, Path]:
    """``(aaco.toml, kubelet socket, proc root)`` for the k8s collector (see the
    module doc); the proc root gets the daemon's cgroup once its pid is known."""
    logs, sysfs, proc = tmp / "containers", tmp / "sys", tmp / "proc"
    logs.mkdir()
    (logs / f"magika-0_ml_server-{K8S_CID}.log").write_text("")
    (sysfs / "module/amdgpu/drivers/pci:amdgpu/0000:03:00.0").mkdir(parents=True)
    proc.mkdir()
    sock = tmp / "kubelet.sock"
    cfg = tmp / "aaco.toml"
    cfg.write_text(
        f'[collectors.k8s]\nsocket = "{sock}"\nlog_dir = "{logs}"\nsysfs_root = "{sysfs}"\n'
        f'proc_root = "{proc}"\ninterval_s = 1.0\n'
    )
    return cfg, sock, proc


def _place_in_pod(proc_root: Path, pid: int) -> None:
    (proc_root / str(pid)).mkdir()
    (proc_root / str(pid) / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{K8S_UID.replace('-', '_')}.slice/cri-containerd-{K8S_CID}.scope\n"
    )


def _prometheus_config(tmp: Path, metrics_port: int) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in RULE_FILES],
        "scrape_configs": [
            {"job_name": JOB, "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
        ],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def _wait_for_rule_evaluation(prom: Prom, after: float, timeout: float) -> None:
    """Wait until every rule group has been evaluated at or after the Unix time ``after``."""

    def evaluated() -> bool:
        groups = prom.api("rules")["data"]["groups"]
        stamps = [g.get("lastEvaluation", "") for g in groups]
        if not groups or any(s.startswith("0001") or not s for s in stamps):
            return False
        return all(_rfc3339(s) >= after for s in stamps)

    _wait("every rule group to be evaluated on the analytics series", evaluated, timeout)


def _pin_query_time(prom: Prom, timeout: float) -> float:
    """A Unix time before which every scrape of the daemon for 35 s had
    succeeded (``min_over_time(up[35s]) == 1``, so the last run of the 30 s
    recording group saw live inputs too), for every later query to be
    evaluated at. A scrape that times out (1 s, while the daemon's inference
    keeps both cores busy) makes Prometheus mark every series of the target
    stale, and a query in the following second would come back empty. The
    time is after the last evaluation of every rule group slower than 2 s
    (the 30 s recording group), so recorded series exist at it."""
    pinned: list[float] = []

    def clean() -> bool:
        t = time.time() - 1.0  # samples up to t have been ingested
        groups = prom.api("rules")["data"]["groups"]
        if any(_rfc3339(g["lastEvaluation"]) > t for g in groups if g["interval"] > 2):
            return False  # a slow rule group's only fresh samples are stamped after t
        res, _ = prom.query(f'min_over_time(up{{job="{JOB}"}}[35s])', at=t)
        if res and float(res[0]["value"][1]) == 1.0:
            pinned.append(t)
            return True
        return False

    _wait("35 s of successful scrapes of the daemon", clean, timeout)
    return pinned[-1]


def _rfc3339(stamp: str) -> float:
    # Prometheus writes nanoseconds; datetime takes microseconds.
    stamp = re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


@pytest.mark.apt
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_panel_variable_and_rule_query_returns_data_from_live_daemon(
    tmp_path: Path,
) -> None:
    """Against a live daemon scraped by a real Prometheus with the repo's rules loaded, every
    dashboard panel query, variable query and recording-rule expression returns series, every
    metric selector of every alert matches series, and every rule evaluates without error.
    The gpu collector reads the rocm-smi TEST DOUBLE (real recorded rocm-smi JSON, cards from
    several recordings), so GPU panels must have data; of NEEDS_ABSENT_SOURCE only the queries
    whose source this run still lacks (ECC, throttle residency; eBPF when the sched source is
    /proc) may be empty."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus not found; install Debian's `prometheus` package")
    assert RULE_FILES, "no rule files in deploy/prometheus/rules"
    assert os.access(TEST_DOUBLE_BIN / "rocm-smi", os.X_OK), "tests/deploy/bin/rocm-smi"
    gen = _load_generator()

    metrics_port, prom_port, nats_port = _free_port(), _free_port(), _free_port()
    daemon_log, prom_log = tmp_path / "daemon.log", tmp_path / "prometheus.log"
    llm_log, llm_script = tmp_path / "llm.log", tmp_path / "llm_loop.py"
    llm_script.write_text(LLM_LOOP)
    k8s_cfg, kubelet_sock, proc_root = _k8s_config(tmp_path)
    daemon_argv = [
        sys.executable, "-m", "exporter.cli", "run", "--model", "magika",
        "--metrics-addr", f"127.0.0.1:{metrics_port}", "--window", "10",
        "--state-dir", str(tmp_path / "nats"), "--duration", "200",
        "--config", str(k8s_cfg), "--nats-listen", f"127.0.0.1:{nats_port}",
    ]  # fmt: skip
    llm_argv = [sys.executable, "-m", "exporter.cli", "instrument", "--", sys.executable,
                str(llm_script)]
    prom_argv = [
        prometheus,
        f"--config.file={_prometheus_config(tmp_path, metrics_port)}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prom_port}",
    ]
    prom = Prom(f"http://127.0.0.1:{prom_port}")
    failures: list[str] = []

    with (
        FakeKubelet(kubelet_sock, {("ml", "magika-0", "server"): [("amd.com/gpu",
                                                                 ["0000:03:00.0"])]}),
        # Its encoder and decoder sessions are two models of one pid (no AACO_MODEL_NAME).
        # It starts first, so the daemon can watch it (--pid); its publisher retries
        # until the daemon's NATS is up.
        _process(llm_argv, llm_log, "generate loop",
                 {"AACO_NATS_URL": f"nats://127.0.0.1:{nats_port}"}) as llm_proc,
        _process(
            [*daemon_argv, "--pid", str(llm_proc.pid)],
            daemon_log,
            "aaco-exporter",
            {"PATH": f"{TEST_DOUBLE_BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}"},
        ) as daemon,
        _process(prom_argv, prom_log, "prometheus") as prom_proc,
    ):
        _place_in_pod(proc_root, daemon.pid)

        def daemon_warm() -> bool:
            if daemon.poll() is not None:
                pytest.fail(f"daemon exited early:\n{daemon_log.read_text()[-3000:]}")
            text = _get(f"http://127.0.0.1:{metrics_port}/metrics").decode()
            if llm_proc.poll() is not None:
                pytest.fail(f"generate loop exited early:\n{llm_log.read_text()[-3000:]}")
            return all(f"\n{name}{{" in text for name in (*ANALYTICS_SERIES, *LLM_SERIES))

        _wait("Prometheus to be ready", lambda: _get(f"{prom.base}/-/ready"), 30, prom_log)
        _wait("the daemon's analytics series on /metrics", daemon_warm, 60, daemon_log)
        have_all = " and ".join(f"group({name})" for name in ANALYTICS_SERIES)
        scraped = _wait(
            "Prometheus to scrape the analytics series",
            lambda: prom.query(have_all)[0],
            15,
            prom_log,
        )
        # Rate windows need >= 2 samples of every series: let a few scrapes pass, then
        # wait for every rule group (the recording group runs every 30 s) to evaluate.
        _wait_for_rule_evaluation(prom, after=scraped + 3, timeout=45)
        prom.at = _pin_query_time(prom, timeout=60)
        assert daemon.poll() is None, daemon_log.read_text()[-3000:]
        assert prom_proc.poll() is None, prom_log.read_text()[-3000:]

        # --- which sources this run has ---------------------------------------------
        up, error = prom.query("aaco_collector_up == 1")
        assert up is not None, error
        sources = {s["metric"]["collector"]: s["metric"].get("source", "") for s in up}
        log_text = daemon_log.read_text(errors="replace")
        assert sources.get("gpu") == "rocm-smi", (
            f"the gpu collector must read the rocm-smi test double, got {sources}; "
            "an amdsmi library or amd-smi on PATH comes first in auto detection\n"
            + "\n".join(line for line in log_text.splitlines() if "gpu" in line)
        )
        gpu_drops = [line for line in log_text.splitlines() if "gpu: drop" in line]
        assert not gpu_drops, "the replayed rocm-smi output was not read cleanly:\n" + "\n".join(
            gpu_drops
        )
        power_high, error = prom.query(
            f'ALERTS{{alertname="AacoGpuPowerHigh", gpu_index="{POWER_CAPPED_GPU}"}}'
        )
        if not power_high:
            failures.append(
                f"alert AacoGpuPowerHigh is neither pending nor firing for the replayed GPU "
                f"{POWER_CAPPED_GPU} at its power cap ({error or 'no series'})"
            )
        proven = {gen.GPU_REASON, gen.ALERT_REASON}
        if sources.get("sched") == "ebpf":
            proven.add(gen.EBPF_REASON)
        # Queries whose source this run still lacks, and the metrics only they use.
        absent_exprs = {e: r for e, r in gen.NEEDS_ABSENT_SOURCE if r not in proven}
        absent_metrics = {
            _metric_name(sel): reason
            for expr, reason in absent_exprs.items()
            for sel in _selectors(gen.render_query(expr))
        }

        # --- dashboard panels -------------------------------------------------------
        panel_queries: list[tuple[str, str]] = gen.all_queries()
        panels_with_data: list[str] = []
        for panel, expr in panel_queries:
            rendered = gen.render_query(expr, VARIABLES)
            result, error = prom.query(rendered)
            if result is None:
                failures.append(f"panel {panel}: query failed ({error}): {rendered}")
            elif result:
                panels_with_data.append(panel)
            elif expr not in absent_exprs:
                failures.append(f"panel {panel}: no series: {rendered}")

        # --- the scheduler panels on the generate loop's pid with two models ----------
        two, error = prom.query(TWO_MODEL_PIDS)
        pids = {(s["metric"]["host"], s["metric"]["pid"]) for s in two or []}
        if not pids:
            failures.append(f"no pid with two models ({error or 'no series'}): {TWO_MODEL_PIDS}")
        for panel, expr in panel_queries:
            if "on (host, pid)" not in expr:
                continue
            result, _ = prom.query(gen.render_query(expr, VARIABLES))
            for host, pid in pids:
                models = {
                    s["metric"]["model"]
                    for s in result or []
                    if (s["metric"]["host"], s["metric"]["pid"]) == (host, pid)
                }
                if models != {"encoder", "decoder"}:
                    failures.append(
                        f"panel {panel}: pid {pid} shows models {models}, not its encoder "
                        "and decoder"
                    )

        for var, expr in gen.variable_queries():
            rendered = gen.render_query(expr, VARIABLES)
            result, error = prom.query(rendered)
            needs = [absent_metrics.get(_metric_name(s)) for s in _selectors(rendered)]
            if result is None:
                failures.append(f"variable {var}: query failed ({error}): {rendered}")
            elif not result and not (needs and all(needs)):
                failures.append(f"variable {var}: no series: {rendered}")

        # --- recording and alerting rules -------------------------------------------
        rules = _rules()
        recording = [r for r in rules if "record" in r]
        alerts = [r for r in rules if "alert" in r]
        for rule in recording:
            name, expr = rule["record"], rule["expr"]
            result, error = prom.query(expr)
            if result is None:
                failures.append(f"recording rule {name}: query failed ({error}): {expr}")
            elif not result:
                failures.append(f"recording rule {name}: expression has no series: {expr}")
            recorded, _ = prom.query(f'group({{__name__="{name}"}})')
            if not recorded:
                failures.append(f"recording rule {name}: Prometheus recorded no series")
        alert_selectors = 0
        for rule in alerts:
            name, expr = rule["alert"], rule["expr"]
            result, error = prom.query(expr)
            if result is None:
                failures.append(f"alert {name}: expression failed ({error}): {expr}")
            selectors = _selectors(expr)
            if not selectors:
                failures.append(f"alert {name}: no metric selector found in {expr!r}")
            for sel in dict.fromkeys(selectors):
                alert_selectors += 1
                matched, error = prom.query(f"group({_positive(sel)})")
                if matched is None:
                    failures.append(f"alert {name}: selector failed ({error}): {sel}")
                elif not matched and _metric_name(sel) not in absent_metrics:
                    failures.append(f"alert {name}: selector matches no series: {sel}")

        # --- rule health as Prometheus evaluated it ------------------------------------
        for group in prom.api("rules")["data"]["groups"]:
            for rule in group["rules"]:
                if rule.get("health") == "err" or rule.get("lastError"):
                    failures.append(
                        f"rule {rule['name']} ({group['name']}): {rule.get('lastError')}"
                    )

    assert len(panel_queries) > 0 and recording and alerts and alert_selectors > 0
    summary = (
        f"{len(panel_queries)} panel queries ({len(panels_with_data)} with data; allowed "
        f"empty: {[p for p, e in panel_queries if e in absent_exprs]}), "
        f"{len(recording)} recording rules, {len(alerts)} alerts "
        f"({alert_selectors} selectors); "
        f"sources {sources}"
    )
    print(summary)
    assert not failures, f"{len(failures)} failing queries; {summary}:\n" + "\n".join(failures)

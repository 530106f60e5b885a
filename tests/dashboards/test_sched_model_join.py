"""The scheduler panels' pid -> model join against a real Prometheus, on a pid with two models.

One process can run several ONNX sessions (the arabic-name-romanizer GRU runs an
encoder and a decoder session in one pid), so ``aaco_graph_nodes`` has several
series per (host, pid).  The sched counters are keyed by pid only; the panels
join them to ``model`` through :data:`PID_MODELS`.  The former join
(``counter * on (host, pid) group_left (model) <models of the pid>``) made the
models the "one" side and failed with "many-to-many matching not allowed".

The data is SYNTHETIC: an OpenMetrics file written here
(``synthetic_two_models_one_pid.om``, linear counters at 15 s steps so every
rate is exact), turned into a TSDB block by ``promtool tsdb
create-blocks-from openmetrics`` and served by Debian's real ``prometheus``;
every query is an instant query at the file's last timestamp.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support import load_path

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((REPO / "deploy" / "prometheus" / "rules").glob("*.yml"))

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z; a fixed time keeps the data deterministic
STEP_S = 15
STEPS = 40
AT = T0 + STEP_S * STEPS  # every query is evaluated at the last sample

#: (pid, model) pairs of aaco_graph_nodes: pid 100 runs two models, 200 one, 300 one
#: but has no sched series (its join gives nothing).
MODELS = (("100", "encoder"), ("100", "decoder"), ("200", "magika"), ("300", "idle"))
#: Sched counter slopes (per second) per pid; pid 400 has no model (joins to nothing).
SLOPES = {"100": 0.5, "200": 0.25, "400": 1.0}
#: Per-kind slope factor, so each kind has a rate of its own.
KIND_FACTOR = {"voluntary": 2.0, "involuntary": 3.0, "minor": 4.0, "major": 0.5}
SCHED_COUNTERS = (
    "aaco_sched_runqueue_wait_seconds_total",
    "aaco_sched_context_switches_total",
    "aaco_sched_migrations_total",
    "aaco_sched_page_faults_total",
)
#: The join this module replaced, as dashboards/generate.py had it (SCHED_BY_MODEL).
FORMER_JOIN = (
    'rate(aaco_sched_runqueue_wait_seconds_total{host=~"$host"}[$__rate_interval]) '
    "* on (host, pid) group_left (model) "
    '(0 * max by (host, pid, model) (aaco_graph_nodes{host=~"$host", model=~"$model", '
    'namespace=~"$namespace", pod=~"$pod"}) + 1)'
)
MANY_TO_MANY = "many-to-many matching not allowed"


def _gen() -> ModuleType:
    return load_path("aaco_dashboards_generate", REPO / "dashboards" / "generate.py")


def _kinds(counter: str) -> tuple[str | None, ...]:
    kinds: tuple[str | None, ...] = _gen().SCHED_KINDS.get(counter, (None,))
    return kinds


def _openmetrics() -> str:
    """The synthetic exposition: one family after another, samples in time order."""
    lines = ["# TYPE aaco_graph_nodes gauge"]
    for i in range(STEPS + 1):
        for n, (pid, model) in enumerate(MODELS):
            labels = f'host="h1",pid="{pid}",model="{model}"'
            lines.append(f"aaco_graph_nodes{{{labels}}} {10 + n} {T0 + STEP_S * i}")
    for counter in SCHED_COUNTERS:
        lines.append(f"# TYPE {counter.removesuffix('_total')} counter")
        for i in range(STEPS + 1):
            for pid, slope in SLOPES.items():
                for kind in _kinds(counter):
                    k = f',kind="{kind}"' if kind else ""
                    rate = slope * KIND_FACTOR.get(kind or "", 1.0)
                    lines.append(
                        f'{counter}{{host="h1",pid="{pid}",comm="python"{k}}} '
                        f"{rate * STEP_S * i} {T0 + STEP_S * i}"
                    )
    return "\n".join([*lines, "# EOF", ""])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Prom:
    """Instant queries against the Prometheus HTTP API at :data:`AT`."""

    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, expr: str) -> tuple[list[dict[str, Any]] | None, str]:
        """(result, "") on success, (None, "errorType: error") on failure."""
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr, "time": str(AT)}
        )
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:  # 422: execution error, body says why
            body = exc.read()
        doc: dict[str, Any] = json.loads(body)
        if doc["status"] != "success":
            return None, f"{doc.get('errorType')}: {doc.get('error')}"
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result, ""


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    """A real prometheus serving the synthetic block (retention long enough for 2026-01-01)."""
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        pytest.fail("prometheus/promtool not found; install Debian's `prometheus` package")
    tmp = tmp_path_factory.mktemp("sched_join")
    om = tmp / "synthetic_two_models_one_pid.om"
    om.write_text(_openmetrics())
    tsdb = tmp / "tsdb"
    made = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    config = tmp / "prometheus.yml"
    config.write_text("global: {}\n")
    port = _free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            with suppress(OSError), urllib.request.urlopen(f"{base}/-/ready", timeout=5):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not become ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield Prom(base)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _pid_joins() -> list[tuple[str, str]]:
    """Every panel query of every dashboard that joins on (host, pid)."""
    return [(p, e) for p, e in _gen().all_queries() if "on (host, pid)" in e]


def _expected(counter: str, kind: str | None, models: set[str]) -> dict[tuple[str, ...], float]:
    return {
        (pid, model, kind or ""): SLOPES[pid] * KIND_FACTOR.get(kind or "", 1.0)
        for pid, model in MODELS
        if pid in SLOPES and model in models
    }


def _got(result: list[dict[str, Any]]) -> dict[tuple[str, ...], float]:
    got: dict[tuple[str, ...], float] = {}
    for s in result:
        m = s["metric"]
        key = (m["pid"], m["model"], m.get("kind", ""))
        assert key not in got, f"two series for {key}: {result}"
        got[key] = float(s["value"][1])
    return got


@pytest.mark.apt
def test_sched_panels_give_one_series_per_model_of_a_two_model_pid(prom: Prom) -> None:
    """Each dashboard query that joins on (host, pid) evaluates without error when pid 100
    has two models and returns one series per (pid, model[, kind]) with the pid's rate:
    pid 100 twice (encoder, decoder), pid 200 once, nothing for the pid without sched
    series (300) nor for the sched pid without a model (400)."""
    gen = _gen()
    joins = _pid_joins()
    expected_exprs = {gen.sched_by_model(c, k) for c in SCHED_COUNTERS for k in _kinds(c)}
    assert {e for _, e in joins} == expected_exprs, "a pid join outside sched_by_model"
    for counter in SCHED_COUNTERS:
        for kind in _kinds(counter):
            expr = gen.render_query(gen.sched_by_model(counter, kind))
            result, error = prom.query(expr)
            assert result is not None, f"{expr}: {error}"
            assert _got(result) == _expected(counter, kind, {m for _, m in MODELS}), expr
            labels = {"host", "pid", "model", *(["kind"] if kind else [])}
            assert all(set(s["metric"]) == labels for s in result), result


@pytest.mark.apt
@pytest.mark.parametrize("model", ["encoder", "magika", "encoder|magika", "idle"])
def test_model_variable_keeps_only_the_chosen_models(prom: Prom, model: str) -> None:
    """With $model set, the joined sched series are those of the chosen models only
    (encoder alone of pid 100's two; none for a model whose pid has no sched series)."""
    gen = _gen()
    expr = gen.render_query(gen.sched_by_model(SCHED_COUNTERS[0]), {"model": model})
    result, error = prom.query(expr)
    assert result is not None, f"{expr}: {error}"
    assert _got(result) == _expected(SCHED_COUNTERS[0], None, set(model.split("|")))


@pytest.mark.apt
def test_former_join_fails_with_many_to_many_on_a_two_model_pid(prom: Prom) -> None:
    """The join the panels had errors with "many-to-many matching not allowed" once a
    pid has two models, and works when $model leaves one model per pid: this data is
    what the fix is for, and the test would have caught the bug."""
    gen = _gen()
    result, error = prom.query(gen.render_query(FORMER_JOIN))
    assert result is None and MANY_TO_MANY in error, (result, error)
    one_model, error = prom.query(gen.render_query(FORMER_JOIN, {"model": "magika"}))
    assert one_model is not None, error
    assert _got(one_model) == _expected(SCHED_COUNTERS[0], None, {"magika"})


@pytest.mark.apt
def test_every_query_and_rule_evaluates_on_a_two_model_pid(prom: Prom) -> None:
    """No panel query, variable query, recording-rule or alert expression errors on data
    where one pid has two models."""
    gen = _gen()
    exprs = [gen.render_query(e) for _, e in gen.all_queries() + gen.variable_queries()]
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            exprs.extend(r["expr"] for r in group["rules"])
    assert len(exprs) > len(_pid_joins()) > 0
    failures = [f"{e}: {err}" for e in exprs for res, err in [prom.query(e)] if res is None]
    assert failures == []

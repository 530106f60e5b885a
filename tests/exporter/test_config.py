"""`--config aaco.toml`: every sample.toml loads, bad files fail with
FILE:KEY, precedence is flag > environment > file > default, and one file sets
the GPU source, the sched cgroup and OTLP sampling of a running daemon (real
gRPC receiver, real /proc, the synthetic sysfs tree)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from exporter.config import ConfigError, load_config, to_toml
from exporter.natsserver import EmbeddedNats, free_port
from exporter.sinks.otel_env import build_otlp_config
from tests.support import ROOT, load_path, scrape_metrics

rx = load_path("aaco_otlp_receiver", ROOT / "tests/exporter/sinks/otlp_receiver.py")
EXE = str(Path(sys.executable).parent / "aaco-exporter")
SYSFS = ROOT / "collectors/gpu/testdata/sysfs_synthetic"


@pytest.mark.parametrize("sample", sorted(ROOT.glob("collectors/*/sample.toml")),
                         ids=lambda p: p.parent.name)
def test_every_sample_toml_is_a_loadable_config(sample: Path) -> None:
    """Each plugin's sample.toml is a real config: it loads, and its keys pass
    the plugin's typed OPTIONS."""
    cfg = load_config(sample)
    assert list(cfg.collectors) == [sample.parent.name]


@pytest.mark.parametrize(("text", "where"), [
    ("[runn]\nx = 1\n", ":runn: unknown section"),
    ("[run]\nmetrics_adr = 'x'\n", ":run.metrics_adr: unknown key"),
    ("[collectors.gpu]\nsource = 3\n", ":collectors.gpu.source: expected str"),
    ("[collectors.gpu]\nsorce = 'x'\n", ":collectors.gpu.sorce: unknown option"),
    ("[collectors.nope]\nx = 1\n", ":collectors.nope: unknown collector"),
    ("[otlp]\ntop_k = 'many'\n", ":otlp.top_k: wrong type"),
    ("[run\n", ": not TOML"),
])
def test_a_bad_file_is_one_error_naming_file_and_key(tmp_path: Path, text: str,
                                                     where: str) -> None:
    f = tmp_path / "aaco.toml"
    f.write_text(text)
    try:
        load_config(f)
        from typer.testing import CliRunner

        from exporter.cli import app  # [run] keys are checked against run's flags

        r = CliRunner().invoke(app, ["run", "--config", str(f)])
        assert r.exit_code == 2
        msg = r.output
    except ConfigError as e:
        msg = str(e)
    assert f"{f}{where}" in msg, msg


def test_run_rejects_a_wrong_type_for_a_flag_key(tmp_path: Path) -> None:
    """[run] values are converted like the flag's own value: errors name the key."""
    f = tmp_path / "aaco.toml"
    f.write_text("[run]\nmax_watched = 'many'\n")
    r = subprocess.run([EXE, "run", "--config", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and f"{f}:run.max_watched:" in r.stderr


def test_otlp_precedence_is_flag_then_environment_then_file() -> None:
    file = {"endpoint": "file:4317", "sample_every": 3, "top_k": 4, "service_name": "f"}
    cfg = build_otlp_config({}, {}, file)
    assert (cfg.endpoint, cfg.sample_every, cfg.top_k, cfg.service_name) == (
        "file:4317", 3, 4, "f")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "env:4317", "OTEL_SERVICE_NAME": "e"}
    cfg = build_otlp_config({}, env, file)
    assert (cfg.endpoint, cfg.service_name, cfg.top_k) == ("env:4317", "e", 4)
    cfg = build_otlp_config({"endpoint": "flag:4317"}, env, file)
    assert cfg.endpoint == "flag:4317"


def test_config_show_prints_the_effective_toml_with_secrets_masked(tmp_path: Path) -> None:
    """`config show` = defaults < file < environment, as TOML that loads back."""
    f = tmp_path / "aaco.toml"
    f.write_text("[run]\nwatch_comm = '^vllm'\nmax_watched = 8\n[collectors.gpu]\n"
                 "source = 'rocm-smi'\n[otlp]\ntop_k = 7\n")
    env = dict(os.environ, AACO_NATS_PASSWORD="hunter2", OTEL_SERVICE_NAME="svc")
    r = subprocess.run([EXE, "config", "show", "--config", str(f)], capture_output=True,
                       text=True, timeout=60, env=env, check=True)
    assert "hunter2" not in r.stdout and 'nats_password = "***"' in r.stdout
    back = tmp_path / "back.toml"
    back.write_text(r.stdout)
    shown = load_config(back)
    assert (shown.run["watch_comm"], shown.run["max_watched"], shown.run["window"]) == (
        "^vllm", 8, 30.0)
    assert shown.collectors == {"gpu": {"source": "rocm-smi"}}
    assert shown.otlp == {"top_k": 7, "service_name": "svc"}


def test_to_toml_round_trips_through_tomllib() -> None:
    import tomllib

    data = {"run": {"a": "x\"y", "b": [1, 2], "c": True, "d": 1.5},
            "collectors": {"gpu": {"source": "sysfs"}}, "otlp": {"h": {"k": "v"}}}
    assert tomllib.loads(to_toml(data)) == data


_scrape = scrape_metrics


@pytest.mark.root
@pytest.mark.slow
def test_one_config_file_sets_gpu_source_sched_cgroup_and_otlp_sampling(
        tmp_path: Path) -> None:
    """A daemon started with only --config (plus --model for load) reads the
    GPU through sysfs from the file's root, watches the file's cgroup with the
    /proc source, and exports iterations with the file's span policy: only
    iteration 0 (sample_every = 10**6) keeps all its kernels, every other keeps
    its top_k = 2 longest (defaults: every 10th keeps all, the rest 20)."""
    if os.geteuid() != 0:
        pytest.fail("needs root to make a cgroup (CI runs as root)")
    roots = [Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")]
    root = next(r for r in roots if (r / "cgroup.procs").exists())
    name = f"aaco-cfg-{uuid.uuid4().hex[:8]}"
    (root / name).mkdir()
    sleeper = subprocess.Popen(["sleep", "600"])
    port = free_port()
    try:
        (root / name / "cgroup.procs").write_text(str(sleeper.pid))
        with rx.GrpcReceiver() as receiver, EmbeddedNats(tmp_path / "nats") as srv:
            cfg = tmp_path / "aaco.toml"
            cfg.write_text(f"""
[run]
model = "magika"
nats = "{srv.url}"
metrics_addr = "127.0.0.1:{port}"
log_level = "WARNING"
[collectors.gpu]
source = "sysfs"
sysfs_root = "{SYSFS}"
[collectors.sched]
source = "proc"
cgroup = "{name}"
[otlp]
endpoint = "http://{receiver.endpoint}"
sample_every = 1000000
top_k = 2
""")
            proc = subprocess.Popen([EXE, "run", "--config", str(cfg)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                deadline, m = time.monotonic() + 60, {}
                while time.monotonic() < deadline:
                    try:
                        m = _scrape(port)
                    except OSError:
                        m = {}
                    if (any(lab.get("pid") == str(sleeper.pid)
                            for lab, _ in m.get("aaco_sched_cpu_seconds_total", []))
                            and m.get("hw_gpu_power_watts") and len(receiver.traces) >= 2):
                        break
                    time.sleep(0.5)
            finally:
                proc.terminate()
                out, _ = proc.communicate(timeout=30)
        up = {(lab["collector"], lab["source"]): v for lab, v in m.get("aaco_collector_up", [])}
        assert up.get(("gpu", "sysfs")) == 1.0, (up, out.decode()[-1500:])
        assert up.get(("sched", "proc")) == 1.0, up
        assert m.get("hw_gpu_power_watts"), "no sysfs gauge from the file's sysfs_root"
        assert any(lab.get("pid") == str(sleeper.pid)
                   for lab, _ in m["aaco_sched_cpu_seconds_total"]), "cgroup not watched"
        spans = rx.spans_of(receiver.traces)
        iters = {s.span_id for _, s in spans if s.name == "inference"}
        kids: dict[bytes, int] = {}
        for _, s in spans:
            if s.parent_span_id in iters:
                kids[s.parent_span_id] = kids.get(s.parent_span_id, 0) + 1
        assert len(iters) >= 3 and kids
        counts = sorted(kids.values())
        assert counts[-2] == 2, counts  # all but (at most) iteration 0 keep top_k = 2
        assert counts.count(2) >= len(iters) - 1
    finally:
        sleeper.kill()
        sleeper.wait()
        for _ in range(50):
            try:
                (root / name).rmdir()
                break
            except OSError:
                time.sleep(0.1)

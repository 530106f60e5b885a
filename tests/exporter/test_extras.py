"""Optional dependencies are imported only when used; a missing extra is one line.

Each check runs in a fresh interpreter (``sys.modules`` of this test process
holds whatever other tests imported). A missing extra is simulated the way
Python itself spells it: ``sys.modules[NAME] = None`` makes ``import NAME``
raise ``ModuleNotFoundError`` with ``name == NAME``, as on a bare install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporter.extras import MissingExtra, require

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("onnxruntime", "onnx", "opentelemetry", "perfetto", "river", "scipy", "pandas",
         "grpc")
"""Top-level packages of the extras ``run`` with default options must not import."""


def _python(code: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _cli(block: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh interpreter with the top-level packages ``block`` missing."""
    return _python(f"""
        import sys
        for name in {block!r}:
            sys.modules[name] = None
        sys.argv = ["aaco-exporter", *sys.argv[1:]]
        from exporter.cli import main
        main()
        """, *argv)


def test_require_names_the_extra_and_lets_a_broken_install_through() -> None:
    """require() turns a missing module (or missing parent package) into
    MissingExtra naming the extra, and re-raises an ImportError raised from
    inside an installed module unchanged."""
    with pytest.raises(MissingExtra) as ei:
        require("no_such_pkg_aaco.sub", "otlp", "OTLP export")
    assert str(ei.value) == ("OTLP export needs the 'otlp' extra: "
                             "pip install 'aaco-exporter[otlp]'")
    assert ei.value.extra == "otlp"
    assert require("json.decoder", "x", "y").__name__ == "json.decoder"
    sys.modules["aaco_broken_mod"] = None  # type: ignore[assignment]
    try:
        with pytest.raises(MissingExtra):  # the module itself missing: the extra
            require("aaco_broken_mod", "analytics", "diff")
    finally:
        del sys.modules["aaco_broken_mod"]


def _daemon(state: Path, setup: str, scrape_after_s: float, run_s: float
            ) -> tuple[str, list[str]]:
    """Run the daemon of ``DaemonOptions()`` (free ports, ``state`` as its state
    directory, then the ``opts.…`` lines of ``setup``) in a fresh interpreter
    for ``run_s``; returns its /metrics text scraped ``scrape_after_s`` after
    it was ready, and the modules it had imported when it stopped."""
    setup = textwrap.indent(textwrap.dedent(setup).strip(), " " * 8)
    r = _python(f"""
        import asyncio, json, os, sys, urllib.request
        from exporter.bus import BusConfig
        from exporter.daemon import DaemonOptions, run_daemon
        from exporter.natsserver import free_port

        opts = DaemonOptions()
        opts.metrics_host, opts.metrics_port = "127.0.0.1", free_port()
        opts.nats_listen = ("127.0.0.1", free_port())
        opts.state_dir = {str(state)!r}
        opts.duration_s = {run_s!r}
{setup}
        texts = []

        async def main():
            ready = asyncio.Event()
            task = asyncio.create_task(run_daemon(opts, BusConfig(), ready))
            await ready.wait()
            await asyncio.sleep({scrape_after_s!r})
            url = f"http://127.0.0.1:{{opts.metrics_port}}/metrics"
            texts.append(await asyncio.to_thread(lambda: urllib.request.urlopen(url).read()))
            await task

        asyncio.run(main())
        print(json.dumps({{"metrics": texts[0].decode(), "modules": sorted(sys.modules)}}))
        """)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["metrics"], out["modules"]


@pytest.mark.slow
def test_run_with_default_options_imports_no_extra(tmp_path: Path) -> None:
    """The daemon built with DaemonOptions() defaults (ports moved to free
    ones, nothing to watch, no GPU) and run for 3 s serves /metrics without
    importing onnxruntime, onnx, OpenTelemetry, perfetto, river, scipy,
    pandas or grpc."""
    sysfs = tmp_path / "no-gpu-sysfs"
    sysfs.mkdir()
    text, modules = _daemon(tmp_path / "state", f"""
        opts.watch = "none"  # no process: no analytics input to feed drift
        opts.collector_options = {{"gpu": {{"source": "sysfs", "sysfs_root": {str(sysfs)!r}}}}}
        """, 0.0, 3.0)
    assert "aaco_collector_up" in text
    assert [m for m in modules if m.split(".")[0] in HEAVY] == []


def test_run_folding_sched_and_gpu_samples_loads_no_acero_or_parquet(tmp_path: Path) -> None:
    """The daemon watching its own process (scheduler on /proc) with GPU gauges
    from the rocm-smi test double (the real 4x MI100 recording), publishing
    every 0.5 s for 4 s: /metrics shows the process's run-queue counter and
    GPU gauges, and neither pyarrow.acero, pyarrow.dataset nor
    pyarrow.parquet was imported (Arrow's group_by would load all three)."""
    td = ROOT / "collectors" / "gpu" / "testdata"
    text, modules = _daemon(tmp_path / "state", f"""
        os.environ["SMI_FIXTURE"] = {str(td / "smi/telegraf/mi100_rocm602.json")!r}
        opts.watch, opts.pids = "none", [os.getpid()]
        opts.collector_options = {{
            "gpu": {{"source": "rocm-smi", "rocm_smi": {str(td / "smi_ok_synthetic.sh")!r},
                     "interval_s": 0.5}},
            "sched": {{"source": "proc"}}}}
        opts.publish_interval_s = opts.flush_interval_s = 0.5
        """, 3.0, 4.0)
    runq = [ln for ln in text.splitlines()
            if ln.startswith("aaco_sched_runqueue_wait_seconds_total{") and 'pid="' in ln]
    assert runq, text[-3000:]
    assert "hw_gpu_" in text
    assert [m for m in ("pyarrow.acero", "pyarrow.dataset", "pyarrow.parquet")
            if m in modules] == []


def test_drift_loads_only_rivers_two_detector_modules_on_first_sample() -> None:
    """DriftMonitor imports river only when its first sample arrives, and then
    only ADWIN's and PageHinkley's modules: not the river.drift package (whose
    __init__ imports KSWIN, hence scipy.stats). A later `import river.drift`
    hands out the very same classes."""
    r = _python("""
        import json, sys
        from stream_analytics.drift import DriftMonitor
        m = DriftMonitor()
        before = "river" in sys.modules
        for i in range(5):
            m.update("latency", "model", 1.0 + i / 100, ts_ns=i)
        after = {k: k in sys.modules for k in
                 ("river.drift.adwin", "river.drift.page_hinkley", "river.drift",
                  "scipy.stats", "pandas")}
        dets = m._slots[("", "latency", "model")].detectors
        import river.drift
        same = (type(dets["adwin"].detector) is river.drift.ADWIN
                and type(dets["page_hinkley"].detector) is river.drift.PageHinkley)
        print(json.dumps({"before": before, "after": after, "same": same,
                          "detectors": sorted(dets)}))
        """)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["before"] is False
    assert out["after"] == {"river.drift.adwin": True, "river.drift.page_hinkley": True,
                            "river.drift": False, "scipy.stats": False, "pandas": False}
    assert out["same"] is True
    assert out["detectors"] == ["adwin", "cusum", "ewma", "page_hinkley"]


def test_drift_without_river_runs_ewma_and_cusum_and_says_so_once() -> None:
    """Without the analytics extra the river detectors are left out of every
    series and one warning per detector names the extra; EWMA and CUSUM run."""
    r = _python("""
        import json, logging, sys
        sys.modules["river"] = None
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        from stream_analytics.drift import DriftMonitor
        m = DriftMonitor()
        for key in ("a", "b"):
            for i in range(5):
                m.update("latency", key, 1.0, ts_ns=i)
        print(json.dumps(sorted({r["detector"] for r in m.status()})))
        """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == ["cusum", "ewma"]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and all("'analytics' extra" in ln for ln in lines), lines
    assert {ln.split()[2] for ln in lines} == {"page_hinkley", "adwin"}


@pytest.mark.parametrize(("block", "argv", "extra"), [
    (["opentelemetry"], ["run", "--otlp-endpoint", "127.0.0.1:4317", "--duration", "1"],
     "otlp"),
    (["opentelemetry"], ["run", "--otlp-bus", "--duration", "1"], "otlp"),
    (["onnxruntime", "onnx"], ["capture", "--model", "magika", "--iterations", "1"], "ort"),
    (["onnxruntime", "onnx"], ["run", "--model", "magika", "--duration", "1"], "ort"),
], ids=["run-otlp", "run-otlp-bus", "capture-model", "run-model"])
def test_a_feature_without_its_extra_is_one_line_and_exit_2(
        tmp_path: Path, block: list[str], argv: list[str], extra: str) -> None:
    """The CLI names the missing extra in one stderr line (no traceback) and
    exits with status 2 before starting anything."""
    if argv[0] == "run":
        argv = [*argv, "--metrics-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
                "--state-dir", str(tmp_path / "state"), "--watch", "none"]
    else:
        argv = [*argv, "--out", str(tmp_path / "out"), "--quiet"]
    r = _cli(block, *argv)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert len(lines) == 1 and f"needs the '{extra}' extra" in lines[0], lines
    assert f"pip install 'aaco-exporter[{extra}]'" in lines[0]

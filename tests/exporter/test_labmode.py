"""`capture --lab` (exporter/labmode.py): cpuset cgroup, pinning, cpufreq record,
GPU clock lock with restore on exit, error, SIGINT and SIGTERM; refused steps say why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from exporter.labmode import LabMode, latency_cv, parse_cpus

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests/collectors/gpu/bin_lab"
EXE = str(Path(sys.executable).parent / "aaco-exporter")


def _calls(path: Path) -> list[list[str]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The rocm-smi test double first on PATH; returns its call log."""
    calls = tmp_path / "smi_calls.jsonl"
    monkeypatch.setenv("PATH", f"{DOUBLE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SMI_CALLS", str(calls))
    return calls


def _no_cgroups(tmp_path: Path) -> dict[str, Path]:
    mounts = tmp_path / "mounts_synthetic"
    mounts.write_text("proc /proc proc rw 0 0\n")
    return {"mounts": mounts}


def test_parse_cpus_reads_lists_and_ranges_and_names_bad_parts() -> None:
    """'1,3-5' -> [1,3,4,5]; a bad part is named in the error."""
    assert parse_cpus("1,3-5") == [1, 3, 4, 5] and parse_cpus("2") == [2]
    with pytest.raises(ValueError, match="'x' is not N or N-M"):
        parse_cpus("1,x")
    with pytest.raises(ValueError, match="bad range '5-3'"):
        parse_cpus("5-3")


def test_gpu_clocks_are_locked_then_restored_to_the_recorded_level(
        smi: Path, tmp_path: Path) -> None:
    """rocm-smi gets --showid, --showperflevel (the recorded MI250 says auto),
    --setperflevel high on entry, and --setperflevel auto on exit."""
    lines: list[str] = []
    with LabMode(cpus=sorted(os.sched_getaffinity(0)), smi="rocm-smi", say=lines.append,
                 **_no_cgroups(tmp_path)) as lab:
        assert _calls(smi)[-1] == ["--setperflevel", "high"]
    assert _calls(smi) == [["--showid", "--json"], ["--showperflevel", "--json"],
                           ["--setperflevel", "high"], ["--setperflevel", "auto"]]
    rep = lab.report()
    assert rep["gpu_clocks"] == {"tool": "rocm-smi", "gpus": ["card0"],
                                 "prior_level": {"card0": "auto"}, "restore_level": "auto"}
    assert ("restore gpu clocks", True) in [(s["name"], s["ok"]) for s in rep["steps"]]
    assert any(x.startswith("lab gpu_clocks: rocm-smi: 1 GPU(s)") for x in lines)


def test_clocks_are_restored_when_the_capture_raises(smi: Path, tmp_path: Path) -> None:
    """An exception inside lab mode still sets the level back, then propagates."""
    with pytest.raises(RuntimeError, match="boom"), LabMode(
            smi="rocm-smi", say=lambda _m: None, **_no_cgroups(tmp_path)):
        raise RuntimeError("boom")
    assert _calls(smi)[-1] == ["--setperflevel", "auto"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_clocks_are_restored_on_sigint_and_sigterm(smi: Path, tmp_path: Path,
                                                   sig: signal.Signals) -> None:
    """A process in lab mode killed by SIGINT or SIGTERM restores the clocks before
    it exits: the double's last call is --setperflevel auto."""
    code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from exporter.labmode import LabMode
        with LabMode(smi="rocm-smi", mounts=Path({str(_no_cgroups(tmp_path)['mounts'])!r})):
            print("locked", flush=True)
            time.sleep(120)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         stderr=subprocess.PIPE, env=env)
    try:
        assert p.stdout is not None
        while "locked" not in p.stdout.readline():
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
        assert _calls(smi)[-1] == ["--setperflevel", "high"]
        p.send_signal(sig)
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc != 0
    assert _calls(smi)[-1] == ["--setperflevel", "auto"]
    assert [c for c in _calls(smi) if c[0] == "--setperflevel"] == [
        ["--setperflevel", "high"], ["--setperflevel", "auto"]]


def test_a_refused_step_says_why_in_one_line_and_lab_mode_goes_on(
        smi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rocm-smi refusing --setperflevel (no permission): one line naming the
    command and its error, nothing to restore; a cgroup v2 without cpuset and no
    v1 cpuset: one line saying so; the other steps still run."""
    monkeypatch.setenv("SMI_REFUSE", "1")
    cg = tmp_path / "cg2_synthetic"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("memory pids\n")
    mounts = tmp_path / "mounts_synthetic"
    mounts.write_text(f"cgroup2 {cg} cgroup2 rw 0 0\n")
    lines: list[str] = []
    with LabMode(smi="rocm-smi", say=lines.append, mounts=mounts) as lab:
        pass
    steps = {s.name: s for s in lab.steps}
    assert not steps["gpu_clocks"].ok and "exit status 1" in steps["gpu_clocks"].detail
    assert "Permission denied" in steps["gpu_clocks"].detail
    assert not steps["cpuset"].ok and steps["cpuset"].detail == (
        f"cgroup v2 at {cg} offers no cpuset controller (controllers: memory pids), "
        "and no cgroup v1 cpuset: skipped")
    assert steps["pin"].ok and "restore gpu clocks" not in steps
    assert all("\n" not in x for x in lines) and len(lines) == 4
    assert _calls(smi)[-1] == ["--setperflevel", "high"]  # refused; no restore call


def test_cpufreq_records_governor_and_boost_from_sysfs(tmp_path: Path) -> None:
    """A synthetic sysfs with cpufreq: governor, driver and boost are recorded."""
    sysc = tmp_path / "cpu_synthetic"
    for c in ("cpu0", "cpu1"):
        (sysc / c / "cpufreq").mkdir(parents=True)
        (sysc / c / "cpufreq/scaling_governor").write_text("performance\n")
        (sysc / c / "cpufreq/scaling_driver").write_text("amd-pstate-epp\n")
    (sysc / "cpufreq").mkdir()
    (sysc / "cpufreq/boost").write_text("1\n")
    with LabMode(smi="none-such-smi", say=lambda _m: None, sys_cpu=sysc,
                 **_no_cgroups(tmp_path)) as lab:
        pass
    assert lab.info["cpufreq"] == {"governor": {"cpu0": "performance", "cpu1": "performance"},
                                   "driver": {"cpu0": "amd-pstate-epp",
                                              "cpu1": "amd-pstate-epp"},
                                   "boost": {"cpufreq/boost": "1"}}


@pytest.mark.root
def test_the_workload_runs_in_a_dedicated_cpuset_cgroup_that_is_removed_after(
        tmp_path: Path) -> None:
    """As root: inside lab mode this process is in an aaco-lab-PID cpuset cgroup
    (v2, or v1 where v2 has no cpuset) with its threads pinned to the chosen CPU;
    afterwards it is back, the cgroup is gone and the affinity restored."""
    before = sorted(os.sched_getaffinity(0))
    cpu = before[-1]
    with LabMode(cpus=[cpu], smi="none-such-smi", say=lambda _m: None) as lab:
        inside = Path("/proc/self/cgroup").read_text()
        assert sorted(os.sched_getaffinity(0)) == [cpu]
    steps = {s.name: s for s in lab.steps}
    assert steps["cpuset"].ok, steps["cpuset"].detail
    assert f"aaco-lab-{os.getpid()}" in inside
    assert f"aaco-lab-{os.getpid()}" not in Path("/proc/self/cgroup").read_text()
    assert not Path(lab.info["cgroup"]).exists()
    assert sorted(os.sched_getaffinity(0)) == before


def test_latency_cv_is_population_std_over_mean() -> None:
    """[1,2,3] ms -> std 0.8165 / mean 2 = 0.408; one iteration -> None."""
    t = pa.table({"duration_ns": [1_000_000, 2_000_000, 3_000_000]})
    assert latency_cv(t) == pytest.approx((2 / 3) ** 0.5 / 2)
    assert latency_cv(pa.table({"duration_ns": [5]})) is None


@pytest.mark.slow
def test_capture_lab_writes_lab_json_env_details_and_latency_cv(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    """`capture --lab` on magika: each step prints one `lab NAME:` line on stderr,
    lab.json and env.json's lab section list the steps and their restores, env.json
    has kernel and CPU details, derived metrics the latency CV, and no lab cgroup is
    left behind."""
    t0 = time.time()
    r = subprocess.run([EXE, "capture", "--model", "magika", "--iterations", "8", "--warmup",
                        "1", "--out", str(tmp_path), "--quiet", "--lab"], env=cli_env,
                       capture_output=True, text=True, timeout=240, check=False)
    assert r.returncode == 0, r.stderr
    out = Path(r.stdout.strip().splitlines()[-1])
    lab = json.loads((out / "lab.json").read_text())
    names = [s["name"] for s in lab["steps"]]
    assert names[:4] == ["cpuset", "pin", "cpufreq", "gpu_clocks"] and "restore affinity" in names
    for n in names[:4]:
        assert sum(x.startswith(f"lab {n}: ") for x in r.stderr.splitlines()) == 1
    env = json.loads((out / "env.json").read_text())
    assert env["lab"]["steps"] == lab["steps"] and env["cpu"]["logical_cpus"] == os.cpu_count()
    assert env["kernel_details"]["release"] == os.uname().release
    assert {"rocm", "driver", "gpus"} <= set(env)
    d = json.loads((out / "metrics/derived_metrics.json").read_text())
    assert d["latency_cv"] is not None and d["latency_cv"] > 0
    assert "latency CV (std/mean)" in r.stdout
    if lab.get("cgroup"):
        assert not Path(lab["cgroup"]).exists()
    assert lab["started_ns"] >= t0 * 1e9 - 1e9


def test_a_bad_lab_cpu_list_is_refused_with_exit_2_naming_the_flag() -> None:
    """--lab-cpus x and a CPU this process may not use: exit 2, one line naming --lab-cpus."""
    from typer.testing import CliRunner

    from exporter.cli import app

    r = CliRunner().invoke(app, ["capture", "--model", "magika", "--lab", "--lab-cpus", "x"])
    assert r.exit_code == 2 and "--lab-cpus: CPU list 'x': 'x' is not N or N-M" in r.output
    r = CliRunner().invoke(app, ["capture", "--model", "magika", "--lab", "--lab-cpus", "4096"])
    assert r.exit_code == 2 and "CPUs [4096] are not available" in r.output


def test_gpu_details_read_pci_ids_and_kfd_targets_from_sysfs(tmp_path: Path) -> None:
    """A synthetic /sys/class/drm with one AMD card (and a connector to skip) and a
    KFD topology node: vendor/device ids, product name and gfx target version."""
    from exporter.hostinfo import gpu_details

    drm = tmp_path / "drm_synthetic"
    dev = drm / "card0" / "device"
    dev.mkdir(parents=True)
    (drm / "card0-DP-1").mkdir()
    (dev / "vendor").write_text("0x1002\n")
    (dev / "device").write_text("0x74a1\n")
    (dev / "product_name").write_text("AMD Instinct MI300X\n")
    kfd = tmp_path / "kfd_synthetic"
    (kfd / "0").mkdir(parents=True)
    (kfd / "0/properties").write_text("cpu_cores_count 2\ngfx_target_version 0\n")
    (kfd / "1").mkdir()
    (kfd / "1/properties").write_text("simd_count 1216\ngfx_target_version 90402\n")
    (g,) = gpu_details(drm, kfd)
    assert (g["card"], g["vendor"], g["device"]) == ("card0", "0x1002", "0x74a1")
    assert g["product_name"] == "AMD Instinct MI300X"
    assert g["kfd_gfx_target_versions"] == [90402]


def test_lab_with_a_command_is_a_usage_error() -> None:
    """--lab with -- CMD: exit 2, saying it applies to --model captures."""
    from typer.testing import CliRunner

    from exporter.cli import app

    r = CliRunner().invoke(app, ["capture", "--lab", "--", "true"])
    assert r.exit_code == 2 and "--lab applies to --model captures" in r.output

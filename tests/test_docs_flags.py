"""Keep the docs true: every command-line flag the docs, READMEs and deploy
files name exists — in `aaco-exporter`'s own commands, in a script of this
repository (benchmarks, examples), or in the named external tool's list."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from exporter.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
        *sorted(ROOT.glob("collectors/*/README.md")), *sorted((ROOT / "deploy").rglob("*.yml")),
        *sorted((ROOT / "deploy").rglob("*.yaml")), ROOT / "deploy/systemd/aaco-exporter.service"]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
EXTERNAL = {  # flags of other tools the docs show, by tool
    "--build": "docker compose up", "--config": "prometheus (--config.file)",
    "--storage": "prometheus (--storage.tsdb.path)", "--web": "prometheus (--web.*)",
    "--http": "nats-server (--http_port)", "--jetstream": "nats-server",
    "--store": "nats-server (--store_dir)", "--install": "helm upgrade --install",
    "--create-namespace": "helm", "--now": "systemctl enable --now",
    "--json": "rocm-smi / amd-smi", "--showmetrics": "rocm-smi",
    "--output-format": "rocprofv3", "--kernel-trace": "rocprofv3",
    "--hip-runtime-trace": "rocprofv3", "--marker-trace": "rocprofv3",
    "--collection-period": "rocprofv3", "--strict": "mypy", "--help": "every command (click)",
    "--force-reinstall": "pip", "--no-deps": "pip",
    "--attach-duration-msec": "rocprofv3", "--attach-sync-output": "rocprofv3",
    "--pmc": "rocprofv3", "--setperflevel": "rocm-smi", "--showperflevel": "rocm-smi",
    "--perf-level": "amd-smi set",
}


def _own_flags() -> set[str]:
    out: set[str] = set()
    todo = [typer.main.get_command(app)]
    while todo:  # commands of groups too (baseline save, config show)
        for sub in getattr(todo.pop(), "commands", {}).values():
            todo.append(sub)
            for p in sub.params:
                out.update(o for o in (*p.opts, *p.secondary_opts) if o.startswith("--"))
    for script in [*ROOT.glob("benchmarks/*.py"), *ROOT.glob("deploy/examples/*.py")]:
        out.update(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", script.read_text()))
    return out


def test_every_flag_named_in_the_docs_exists() -> None:
    """A flag in docs/, a README or deploy/ that no command or script of ours
    defines, and that is not a listed external tool's, fails with its file."""
    known = _own_flags() | set(EXTERNAL)
    missing = sorted({(m.group(0), str(f.relative_to(ROOT))) for f in DOCS
                      for m in FLAG.finditer(f.read_text()) if m.group(0) not in known})
    assert not missing, f"flags named in docs that do not exist: {missing}"

"""Fuzz every parser of external input: N mutated real files per parser, one core.

    .venv/bin/python benchmarks/fuzz_parsers.py [--cases 100000] [--only rocpd,bus]
        [--seed 1] [--timeout-s 10] [--budget-s SECONDS] [--out benchmarks/results/fuzz]

Targets, seeds and the contract are in ``tests/fuzzing/targets.py`` (the same ones
the CI tests ``tests/**/test_fuzz_*.py`` run with hypothesis at a small budget):
a parser returns a result (dropped rows/fields counted by reason) or raises its
documented error type (the reject reason); any other exception, or a case running
past ``--timeout-s`` (a hang), is a **crash**. Each crash is saved to ``--out`` as
``<target>-<n>.bin`` (the input bytes), ``.recipe`` (seed index, structure-aware
edit seeds and byte-op plan: :func:`tests.fuzzing.targets.case_from_recipe` rebuilds
it) and ``.txt`` (the traceback). Cases are drawn from ``random.Random(--seed)``, so
a run is reproducible. ``--budget-s`` caps the whole run's time: each parser gets
the budget left divided by the parsers left (so the fast ones leave time to the slow
ones) and stops at ``--cases`` or at its share; the table gives the cases actually run.

Prints one row per parser: cases, accepted (clean), accepted with drops, rejected,
reasons (cases per reason, drops and rejects), crashes and cases/s, plus a Markdown
table; writes ``<out>/summary.json``. Exit status 1 when any case crashed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzzing.targets import TARGETS, Target, random_case, run_case  # noqa: E402


class Hang(Exception):
    """A case ran past --timeout-s."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang("case ran past the timeout")


def fuzz_target(t: Target, cases: int, seed: int, timeout_s: int, out: Path,
                work: Path, max_s: float = float("inf")) -> dict[str, object]:
    r = random.Random(f"{seed}:{t.name}")
    reasons: collections.Counter[str] = collections.Counter()
    accepted = with_drops = rejected = crashes = 0
    crash_kinds: collections.Counter[str] = collections.Counter()
    t.seed_list(work)  # setup outside the timing
    t0 = time.perf_counter()
    last = t0
    done = 0
    for n in range(cases):
        if n % 100 == 0 and time.perf_counter() - t0 > max_s:
            break
        done = n + 1
        seed_, data, recipe = random_case(t, work, r)
        signal.alarm(timeout_s)
        try:
            o = run_case(t, seed_, data, work)
        except BaseException as e:  # every other exception is a crash
            signal.alarm(0)
            if isinstance(e, KeyboardInterrupt):
                raise
            crashes += 1
            tb = traceback.extract_tb(e.__traceback__)
            where = f"{tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else "?"
            kind = f"{type(e).__name__}@{where}"
            crash_kinds[kind] += 1
            if crash_kinds[kind] <= 3:
                stem = out / f"{t.name}-{crashes}"
                stem.with_suffix(".bin").write_bytes(data)
                stem.with_suffix(".recipe").write_text(recipe + "\n")
                stem.with_suffix(".txt").write_text(
                    f"target {t.name}, seed file {seed_.name}\n"
                    + "".join(traceback.format_exception(e)), errors="backslashreplace")
            continue
        finally:
            signal.alarm(0)
        if o.rejected:
            rejected += 1
        elif o.drops:
            with_drops += 1
        else:
            accepted += 1
        for k in set(o.drops) | ({o.reason} if o.reason else set()):
            reasons[k] += 1
        now = time.perf_counter()
        if now - last > 30:
            last = now
            print(f"  {t.name}: {n + 1}/{cases} cases, {crashes} crashes, "
                  f"{(n + 1) / (now - t0):.0f}/s", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    return {"parser": t.name, "entry": t.entry, "cases": done, "accepted": accepted,
            "accepted_with_drops": with_drops, "rejected": rejected,
            "reasons": dict(sorted(reasons.items())), "crashes": crashes,
            "crash_kinds": dict(crash_kinds), "wall_s": round(wall, 1),
            "cases_per_s": round(done / wall, 1) if wall else 0.0}


def markdown(rows: list[dict[str, object]]) -> str:
    lines = ["| parser | cases | accepted | with drops | rejected | cases per reason "
             "| crashes | cases/s |", "|---|---:|---:|---:|---:|---|---:|---:|"]
    for s in rows:
        reasons = s["reasons"]
        assert isinstance(reasons, dict)
        rs = ", ".join(f"{k} {v}" for k, v in reasons.items()) or "-"
        lines.append(f"| {s['parser']} | {s['cases']} | {s['accepted']} | "
                     f"{s['accepted_with_drops']} | {s['rejected']} | {rs} | {s['crashes']} | "
                     f"{s['cases_per_s']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100_000, help="cases per parser")
    ap.add_argument("--only", default="", help="comma-separated parser names "
                    f"({', '.join(TARGETS)})")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout-s", type=int, default=10, help="a case past this is a hang")
    ap.add_argument("--budget-s", type=float, default=float("inf"),
                    help="time for the whole run, shared out among the parsers")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fuzz")
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or list(TARGETS)
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        ap.error(f"unknown parser {unknown[0]!r} (known: {', '.join(TARGETS)})")
    a.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    with tempfile.TemporaryDirectory(prefix="aaco-fuzz-",
                                     dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as w:
        start = time.perf_counter()
        for i, name in enumerate(names):
            share = (a.budget_s - (time.perf_counter() - start)) / (len(names) - i)
            s = fuzz_target(TARGETS[name], a.cases, a.seed, a.timeout_s, a.out, Path(w) / name,
                            max_s=share)
            rows.append(s)
            print(json.dumps(s), flush=True)
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(markdown(rows))
    bad = sum(int(str(s["crashes"])) for s in rows)
    if bad:
        print(f"{bad} crashes; inputs saved under {a.out}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

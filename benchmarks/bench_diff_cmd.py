"""The whole ``aaco-exporter diff`` command on replay bundles of realistic size.

```
.venv/bin/python benchmarks/bench_diff_cmd.py [--rows 2000000 10000000] [--repeat 1]
                                              [--baseline-ref REF]
```

For each ``--rows``: the rocprofv3 fixture rows tiled with time-shifted
copies (``bench_rocprof.make_file``, as ``bench_replay.py``) are replayed
once by this tree into a bundle, which is copied as the session side; then
``python -c 'from exporter.cli import main; main()' diff --baseline A B``
runs as a subprocess of this tree and, with ``--baseline-ref REF``, of git
revision REF (``git archive``, byte-compiled first), alternating
``--repeat`` times. Kernel mode (replay bundles have no iterations): the
kernel populations read, grouped and tested, and ``features_from_bundle``
for the bottleneck of each side.

Per run: wall clock around the subprocess, CPU (user + system) from
``os.wait4``, and the command's own peak RSS (``VmHWM`` of
``/proc/<pid>/status`` sampled every 20 ms: ``wait4``'s ``ru_maxrss`` would
start at this script's own peak, see ``bench_replay.py``). The verdict each
tree prints is checked equal, but for its ``p_value`` (REF before c205834
ran the U test on every duration; since then at most 200,000 a side).
Writes ``benchmarks/results/bench_diff_cmd.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replay import _checkout, _hwm, run_replay, wait_sampling
from bench_rocprof import E2E_PID, make_file
from benchcommon import ROOT


def run_diff(root: Path, base: Path, sess: Path) -> dict[str, Any]:
    """One ``diff`` command of tree ``root``: wall, CPU, own peak RSS, verdict."""
    shutil.rmtree(sess / "regress", ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [sys.executable, "-c", "from exporter.cli import main; main()", "diff",
           "--baseline", str(base), str(sess)]
    out_f, err_f = sess.parent / "diff.stdout", sess.parent / "diff.stderr"
    t0 = time.perf_counter()
    with out_f.open("w") as fo, err_f.open("w") as fe:
        proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=fo, stderr=fe)
    peak = [0]

    def sample() -> None:
        got = _hwm(proc.pid)
        if got is not None:
            peak[0] = max(peak[0], got[1])

    status, ru = wait_sampling(proc, sample)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc not in (0, 1):
        raise RuntimeError(f"diff exited {rc}: {err_f.read_text()[-2000:]}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_bytes": peak[0],
            "verdict": json.loads(out_f.read_text())}


def _without_p(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _without_p(x) for k, x in v.items() if k != "p_value"}
    if isinstance(v, list):
        return [_without_p(x) for x in v]
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[2_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--baseline-ref", default="")
    a = ap.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        trees = [("this tree", ROOT)]
        if a.baseline_ref:
            trees.insert(0, (f"ref {a.baseline_ref}", _checkout(a.baseline_ref, Path(d))))
        for _, root in trees:
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"/\.", *(
                str(root / pkg) for pkg in ("exporter", "collectors", "stream_analytics"))],
                check=False, stdout=subprocess.DEVNULL)
        for rows in a.rows:
            src = Path(d) / f"in_{rows}" / str(E2E_PID)
            src.mkdir(parents=True)
            make_file(src / f"replay_{rows}_tiled_from_real_synthetic_kernel_trace.csv", rows)
            out = Path(d) / f"bundles_{rows}"
            run_replay(src.parent, out, rows, parse_trace=False)
            shutil.rmtree(src.parent)
            base = next(p for p in out.iterdir() if p.is_dir())
            sess = out / "session_copy"
            shutil.copytree(base, sess)
            for k in range(a.repeat):
                for code, root in trees:
                    r = run_diff(root, base, sess)
                    r |= {"code": code, "rows": rows, "run": k + 1}
                    results.append(r)
                    print(f"diff {rows:,} rows, {code} (run {k + 1}): wall {r['wall_s']:.2f} s, "
                          f"cpu {r['cpu_s']:.2f} s, peak RSS {r['peak_rss_bytes'] / 2**20:.0f} "
                          f"MiB, regression {r['verdict']['regression']}", flush=True)
            shutil.rmtree(out)
    for rows in a.rows:
        same = [_without_p(r["verdict"]) for r in results if r["rows"] == rows]
        assert all(v == same[0] for v in same), f"verdicts differ at {rows} rows"
    print(f"\n{'code':<14} {'rows':>11} {'wall s':>7} {'cpu s':>7} {'peak MiB':>9}")
    for r in results:
        print(f"{r['code']:<14} {r['rows']:>11,} {r['wall_s']:7.2f} {r['cpu_s']:7.2f} "
              f"{r['peak_rss_bytes'] / 2**20:9.0f}")
    print("verdicts: equal in every run (p_value aside)")
    dest = ROOT / "benchmarks/results/bench_diff_cmd.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps([{k: v for k, v in r.items() if k != "verdict"}
                                for r in results], indent=2))


if __name__ == "__main__":
    main()

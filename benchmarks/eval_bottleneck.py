"""Real-run recorder and bottleneck-classifier evaluation (CPU onnxruntime).

Scenarios (all timings are real runs of onnxruntime on this machine's CPU;
only the *models* are synthetic, built with :mod:`onnx.helper`):

* ``launch``  - ``synthetic_chain_model.onnx``: a chain of 300 alternating
  Add/Mul nodes on a ``[1, 8]`` float tensor, batch 1;
* ``cpu``     - the same chain model while 3 busy-loop processes compete for
  the machine's cores (SII measured from ``/proc/<pid>/task/*/schedstat``);
* ``compute`` - ``synthetic_gemm_model.onnx``: two chained 1024x1024 MatMuls;
* ``memory`` / ``throttled`` / ``compute`` (GPU) - real rocm-smi JSON fixtures
  in ``tests/stream_analytics/testdata/smi/`` (see PROVENANCE.md there).

Each run is written as a session bundle (``profiler/kernels.parquet``,
``telemetry/system_events.parquet``, ``metrics/inference_iters.parquet``,
``metrics/derived_metrics.json``) and classified with
:func:`stream_analytics.bottleneck.features_from_bundle` +
:func:`stream_analytics.bottleneck.classify`.

Usage: ``python benchmarks/eval_bottleneck.py [--repeats 3]`` prints the
confusion matrix and accuracy as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from collectors.proc.sampler import ProcSampler  # noqa: E402
from exporter.schema import KERNEL_SPAN, SCHED_SAMPLE, conform  # noqa: E402
from stream_analytics.sii import SII  # noqa: E402

SMI_DIR = ROOT / "tests" / "stream_analytics" / "testdata" / "smi"


def features_from_smi_json(path: Path, card: str = "card0") -> Any:
    """Classifier features of one card of a real ``rocm-smi --json`` snapshot,
    through the product's own path: :func:`collectors.gpu.rocm_smi.parse_rocm_smi`
    -> GAUGE_SAMPLE rows (:func:`collectors.gpu.rows.to_table`) ->
    :func:`stream_analytics.bottleneck.gauge_features` (a one-sample window, so
    ``mem_share`` of an idle card comes from the activity counters since the
    driver loaded). Raises ``KeyError`` if ``card`` has no readings.
    """
    from collectors.gpu.rocm_smi import parse_rocm_smi
    from collectors.gpu.rows import to_table
    from stream_analytics.bottleneck import Features, gauge_features

    idx = int(card.removeprefix("card"))
    rows = [r for r in parse_rocm_smi(path.read_text(), str(path)).rows if r.gpu_index == idx]
    if not rows:
        raise KeyError(f"{path}: no readings for {card}")
    table = pa.Table.from_batches([to_table(rows, ts_ns=0, source="rocm-smi")])
    return Features(**gauge_features(table))


# ---------------------------------------------------------------- models

def build_chain_model(path: Path, n_ops: int = 300, width: int = 8) -> Path:
    """Write a chain of ``n_ops`` alternating Add/Mul nodes on ``[1, width]``."""
    import onnx
    from onnx import TensorProto, helper

    inits = [
        helper.make_tensor("a", TensorProto.FLOAT, [1, width], [1e-3] * width),
        helper.make_tensor("m", TensorProto.FLOAT, [1, width], [0.999] * width),
    ]
    nodes = []
    prev = "x"
    for i in range(n_ops):
        out = "y" if i == n_ops - 1 else f"t{i}"
        op, other = ("Add", "a") if i % 2 == 0 else ("Mul", "m")
        nodes.append(helper.make_node(op, [prev, other], [out], name=f"{op.lower()}_{i}"))
        prev = out
    graph = helper.make_graph(
        nodes,
        "synthetic_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def build_gemm_model(path: Path, n: int = 1024, depth: int = 2) -> Path:
    """Write ``depth`` chained ``[n, n] x [n, n]`` MatMuls (weights seeded)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), f"w{i}"
        )
        for i in range(depth)
    ]
    nodes = []
    prev = "x"
    for i in range(depth):
        out = "y" if i == depth - 1 else f"t{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out], name=f"matmul_{i}"))
        prev = out
    graph = helper.make_graph(
        nodes,
        "synthetic_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# ---------------------------------------------------------------- CPU hogs
HOG = ("import sys, time\nstop = time.monotonic() + float(sys.argv[1])\n"
       "sys.stdout.write('spinning\\n'); sys.stdout.flush()\n"
       "while time.monotonic() < stop:\n    pass\n")
"""A busy loop that says so on stdout first, then spins until ``argv[1]`` s pass."""


@contextmanager
def cpu_hogs(n: int, max_s: float = 120.0) -> Iterator[list[int]]:
    """Run ``n`` busy-loop processes, each spinning before this returns their
    pids; killed on exit (and each stops by itself after ``max_s``).

    Fresh interpreters (``subprocess``, exec), not ``fork``: a forked child
    of a process with other threads (a test process's nats, gRPC or OTel
    threads) can hang before running its target, holding a lock some thread
    held at the fork; such a "hog" does nothing, and a capture "under
    contention" measured an SII below the cpu-bound threshold (one CI run).
    """
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-S", "-c", HOG, str(max_s)],
                                          stdout=subprocess.PIPE, text=True))
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline() != "spinning\n":
                raise RuntimeError(f"CPU hog {p.pid} did not start: exit {p.wait()}")
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


# ---------------------------------------------------------------- recorder
@dataclass
class Recording:
    """One real run: per-iteration latencies and optional profiler spans."""

    model: str
    graph_node_count: int
    latencies_ns: np.ndarray
    iter_start_ns: np.ndarray
    kernels: pa.Table | None = None
    sched: pa.Table | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def _session(model_path: Path, profile: bool, prefix: str) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = prefix
    return ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])


def record(
    model_path: Path,
    iterations: int,
    *,
    profile: bool = True,
    hogs: int = 0,
    warmup: int = 20,
    sched_every: int = 50,
) -> Recording:
    """Run ``model_path`` ``iterations`` times on CPU and record everything.

    Latency is wall time of ``session.run`` (``time.perf_counter_ns``).
    With ``profile`` the ORT profiler's ``Node``/``*_kernel_time`` events
    become KERNEL_SPAN rows (source ``ort``, family = op type). The process's
    threads are sampled with :class:`ProcSampler` every ``sched_every``
    iterations. ``hogs`` busy loops run during the timed part only.
    """
    import onnx

    g = onnx.load(str(model_path), load_external_data=False).graph
    n_nodes = sum(1 for n in g.node if n.op_type != "Constant")
    name = model_path.stem
    inp = g.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    rng = np.random.default_rng(1)
    if inp.type.tensor_type.elem_type == onnx.TensorProto.INT32:
        x = rng.integers(0, 256, shape).astype(np.int32)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as td:
        sess = _session(model_path, profile, str(Path(td) / "ort"))
        for _ in range(warmup):
            sess.run(None, {inp.name: x})
        lat = np.empty(iterations, dtype=np.int64)
        starts = np.empty(iterations, dtype=np.int64)
        sampler = ProcSampler()
        pid = os.getpid()
        sched_parts: list[pa.Table] = []
        hog_ctx = cpu_hogs(hogs) if hogs else _null()
        with hog_ctx:
            sampler.sample({pid})
            t_wall0 = time.time_ns()
            t_perf0 = time.perf_counter_ns()
            for i in range(iterations):
                t0 = time.perf_counter_ns()
                sess.run(None, {inp.name: x})
                t1 = time.perf_counter_ns()
                lat[i] = t1 - t0
                starts[i] = t_wall0 + (t0 - t_perf0)
                if (i + 1) % sched_every == 0 or i == iterations - 1:
                    sched_parts.append(sampler.sample({pid}))
        kernels = None
        if profile:
            prof = sess.end_profiling()
            kernels = _kernels_from_profile(Path(prof), name, warmup, pid)
    sched = pa.concat_tables(sched_parts) if sched_parts else pa.table({}, schema=SCHED_SAMPLE)
    return Recording(name, n_nodes, lat, starts, kernels, sched, {"hogs": hogs, "profile": profile})


@contextmanager
def _null() -> Iterator[list[int]]:
    yield []


def _kernels_from_profile(path: Path, model: str, skip_runs: int, pid: int) -> pa.Table:
    """KERNEL_SPAN rows from an ORT profile JSON (µs -> ns), warm-up dropped."""
    events = json.loads(path.read_text())
    path.unlink(missing_ok=True)
    runs = sorted(
        e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    runs = runs[skip_runs:]
    if not runs:
        return pa.table({f.name: [] for f in KERNEL_SPAN}, schema=KERNEL_SPAN)
    bounds = np.asarray(runs, dtype=np.int64)
    cols: dict[str, list[Any]] = {f.name: [] for f in KERNEL_SPAN}
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        ts = int(e["ts"])
        it = int(np.searchsorted(bounds, ts, side="right")) - 1
        if it < 0:
            continue
        op = str(e.get("args", {}).get("op_name", "unknown"))
        node = str(e["name"])[: -len("_kernel_time")]
        start = ts * 1000
        dur = int(e["dur"]) * 1000
        row = {
            "start_ns": start,
            "end_ns": start + dur,
            "duration_ns": dur,
            "source": "ort",
            "model": model,
            "pid": pid,
            "tid": int(e.get("tid", 0)),
            "device_type": "cpu",
            "kernel_name": node,
            "kernel_family": op.lower(),
            "op_type": op,
            "node_name": node,
            "iteration": it,
        }
        for k in cols:
            cols[k].append(row.get(k))
    return pa.Table.from_pydict(cols, schema=KERNEL_SPAN)


def concat_recordings(parts: list[Recording]) -> Recording:
    """One recording made of ``parts`` (runs of one model, in order): latencies
    and iteration starts appended, kernel iterations renumbered after the
    previous part's, scheduler rows appended; ``meta`` of the first part.
    Used to interleave two captures in time (ABAB) so both see the same host.
    Raises ``ValueError`` for no parts or parts of different models."""
    if not parts or len({p.model for p in parts}) != 1:
        raise ValueError("concat_recordings: need parts of one model")
    kernels, sched, offset = [], [], 0
    for p in parts:
        if p.kernels is not None:
            k = p.kernels
            i = k.schema.get_field_index("iteration")
            kernels.append(k.set_column(i, "iteration", pc.add(k.column(i), offset)))
        if p.sched is not None:
            sched.append(p.sched)
        offset += len(p.latencies_ns)
    return Recording(
        model=parts[0].model,
        graph_node_count=parts[0].graph_node_count,
        latencies_ns=np.concatenate([p.latencies_ns for p in parts]),
        iter_start_ns=np.concatenate([p.iter_start_ns for p in parts]),
        kernels=pa.concat_tables(kernels) if kernels else None,
        sched=pa.concat_tables(sched) if sched else None,
        meta=dict(parts[0].meta),
    )


def split_alternate(rec: Recording) -> tuple[Recording, Recording]:
    """Two recordings of ``rec``'s even and odd runs (iteration ``i`` becomes
    ``i // 2`` of one of them), kernels split the same way. Both get every
    scheduler row, as both halves ran over the same interval. Two captures
    made this way saw the same ORT sessions and the same host moments: on
    this shared VM the chain model's 50-run medians move between 1.5 and
    3.0 ms within one session, so two separately recorded "quiet" captures
    of it differed by -30% to +50%."""
    halves = []
    for r in (0, 1):
        kernels = None
        if rec.kernels is not None:
            it = rec.kernels.column("iteration")
            k = rec.kernels.filter(pc.equal(pc.bit_wise_and(it, 1), r))
            i = k.schema.get_field_index("iteration")
            kernels = k.set_column(i, "iteration", pc.shift_right(k.column(i), 1))
        halves.append(Recording(
            model=rec.model,
            graph_node_count=rec.graph_node_count,
            latencies_ns=rec.latencies_ns[r::2].copy(),
            iter_start_ns=rec.iter_start_ns[r::2].copy(),
            kernels=kernels,
            sched=rec.sched,
            meta=dict(rec.meta),
        ))
    return halves[0], halves[1]


# ---------------------------------------------------------------- bundle
def write_bundle(rec: Recording, out: Path) -> Path:
    """Write ``rec`` as a session bundle directory (layout of the lead's capture)."""
    for sub in ("model", "profiler", "telemetry", "metrics"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    n = len(rec.latencies_ns)
    it_tab = pa.Table.from_batches([conform("iteration_span", pa.Table.from_pydict(
        {
            "start_ns": rec.iter_start_ns.tolist(),
            "end_ns": (rec.iter_start_ns + rec.latencies_ns).tolist(),
            "duration_ns": rec.latencies_ns.tolist(),
            "source": ["bench"] * n,
            "model": [rec.model] * n,
            "pid": [os.getpid()] * n,
            "iteration": list(range(n)),
            "kernel_count": [0] * n,
        }))])
    pq.write_table(it_tab, out / "metrics" / "inference_iters.parquet")
    if rec.kernels is not None:
        pq.write_table(rec.kernels, out / "profiler" / "kernels.parquet")
    if rec.sched is not None:
        pq.write_table(rec.sched, out / "telemetry" / "system_events.parquet")
    derived = derived_metrics(rec)
    (out / "metrics" / "derived_metrics.json").write_text(json.dumps(derived, indent=2))
    (out / "model" / "model_meta.json").write_text(
        json.dumps({"model": rec.model, "graph_node_count": rec.graph_node_count})
    )
    (out / "session.json").write_text(json.dumps({"model": rec.model, **rec.meta}))
    return out


def derived_metrics(rec: Recording) -> dict[str, Any]:
    """``derived_metrics.json`` content computed from the recording.

    CPU EP definitions: KAR = kernel spans per iteration / graph nodes; launch
    overhead = iteration time not covered by kernel time (profiled iterations);
    LTS = overhead / kernel time; active ratio = kernel time / wall time.
    """
    lat_s = rec.latencies_ns / 1e9
    out: dict[str, Any] = {
        "graph_node_count": rec.graph_node_count,
        "iterations": len(lat_s),
        "latency_ms": {
            "mean": float(np.mean(lat_s) * 1e3),
            "p50": float(np.percentile(lat_s, 50) * 1e3),
            "p99": float(np.percentile(lat_s, 99) * 1e3),
        },
    }
    if rec.sched is not None and rec.sched.num_rows:
        out["sii"] = SII().update(rec.sched).get()
    if rec.kernels is not None and rec.kernels.num_rows:
        k = rec.kernels
        kt = int(np.sum(k.column("duration_ns").to_numpy()))
        wall = int(np.sum(rec.latencies_ns))
        out["kernel_count"] = k.num_rows
        out["kar"] = k.num_rows / len(lat_s) / max(rec.graph_node_count, 1)
        out["launch_tax"] = max(wall - kt, 0) / kt if kt else None
        out["gpu_active_ratio"] = kt / wall if wall else None
    return out


# ---------------------------------------------------------------- SMI fixtures
SMI_CASES: list[tuple[str, str, str]] = [
    # (fixture file, card, expected class)
    ("wandb_mi250_rocm_smi_all_rocm6.json", "card0", "memory-bound"),
    ("rocm_smi_exporter_rocm_smi_all.json", "card1", "throttled"),
    ("rocm_smi_exporter_rocm_smi_all.json", "card0", "compute-bound"),
]


# ---------------------------------------------------------------- evaluation
def run_scenarios(
    workdir: Path, repeats: int = 1, iterations: int = 300
) -> list[tuple[str, str, Path | str]]:
    """Record the real CPU scenarios; returns ``(expected, scenario, bundle)``."""
    chain = build_chain_model(workdir / "synthetic_chain_model.onnx")
    gemm = build_gemm_model(workdir / "synthetic_gemm_model.onnx")
    out: list[tuple[str, str, Path | str]] = []
    for r in range(repeats):
        for exp, scen, model, iters, hogs in (
            ("launch-bound", "chain", chain, iterations, 0),
            ("cpu-bound", "chain+3hogs", chain, iterations, 3),
            ("compute-bound", "gemm1024", gemm, max(iterations // 20, 10), 0),
        ):
            rec = record(model, iters, hogs=hogs, warmup=5)
            b = write_bundle(rec, workdir / f"{scen}_{r}")
            out.append((exp, scen, b))
    return out


def evaluate(repeats: int = 1, iterations: int = 300) -> dict[str, Any]:
    """Confusion matrix and accuracy over real runs and SMI fixtures."""
    from stream_analytics.bottleneck import (
        CLASSES,
        classify,
        features_from_bundle,
    )

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as td:
        for exp, scen, b in run_scenarios(Path(td), repeats, iterations):
            v = classify(features_from_bundle(Path(b)))
            rows.append(
                {"scenario": scen, "expected": exp, "got": v.label, "confidence": v.confidence}
            )
    for fname, card, exp in SMI_CASES:
        v = classify(features_from_smi_json(SMI_DIR / fname, card))
        rows.append(
            {
                "scenario": f"{fname}:{card}",
                "expected": exp,
                "got": v.label,
                "confidence": v.confidence,
            }
        )
    labels = [*CLASSES, "unknown"]
    cm = {e: dict.fromkeys(labels, 0) for e in labels}
    for r in rows:
        cm[r["expected"]][r["got"]] += 1
    acc = sum(r["expected"] == r["got"] for r in rows) / len(rows)
    return {"rows": rows, "confusion": cm, "accuracy": acc, "n": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=300)
    a = ap.parse_args()
    print(json.dumps(evaluate(a.repeats, a.iterations), indent=2))


if __name__ == "__main__":
    main()

"""ProfilerStep#N -> iterations on the real MI250 Kineto trace (HTA test data).

Hand count (read from the gunzipped JSON, ``ts``/``dur`` in us, all on pid
597913; the CPU ranges are ``cat == "user_annotation"``):

* ProfilerStep#1: ts 4203669603187.439, dur 9288.291 -> [..603187.439, ..612475.730]
* ProfilerStep#2: ts 4203669612512.740, dur   49.073 -> [..612512.740, ..612561.813]
* gpu_user_annotation ProfilerStep#1 (pid 2): ts 4203669603454.205, dur 1031.368
  -> [..603454.205, ..604485.573]

The 14 ``cat == "kernel"`` events, each with its launch call (``cuda_runtime``
hipLaunchKernel / hipExtModuleLaunchKernel, same ``args.correlation``), the
launch ``ts`` (4203669xxxxxx.xxx us, prefix dropped) and the step holding it:

====  =========================================  ===============  ==========  ======
corr  kernel (start)                             launch ts        launch tid  step
====  =========================================  ===============  ==========  ======
118   elementwise_kernel (603771.648)            603752.847       597913      1
121   Cijk_Alik_Bljk_SB_Bias... (603847.969)     603834.612       597913      1
122   vectorized_elementwise (603936.769)        603924.152       597913      1
124   vectorized_elementwise (604296.131)        604283.092       597913      1
125   reduce_kernel (604337.731)                 604327.065       597913      1
126   vectorized_elementwise (604482.212)        604464.796       597913      1
127   vectorized_elementwise (604799.013)        604780.685       598009      1
128   elementwise_kernel (604887.494)            604875.434       598009      1
129   vectorized_elementwise (604993.254)        604980.333       598009      1
132   Cijk_Ailk_Bjlk_SB_Bias... (605185.735)     605171.545       598009      1
133   reduce_kernel (605284.296)                 605273.068       598009      1
134   vectorized_elementwise (611931.370)        605382.766       598009      1
135   vectorized_elementwise (612092.491)        612081.970       598009      1
136   multi_tensor_apply (612357.612)            612340.480       597913      1
====  =========================================  ===============  ==========  ======

So ProfilerStep#1 holds all 14 (tid 598009 is the autograd thread of the same
process), ProfilerStep#2 (a 49 us tail with no launch) holds 0. The GPU
annotation of step 1 holds the kernel *starts* of corr 118-126: 6 kernels.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from collectors.rocprof.jsonfmt import iter_kineto, kineto_model
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths

FIXTURE = (Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"
           / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
HAND_STEP_KERNELS = {1: 14, 2: 0}  # counted by hand, see the module doc
HAND_TOTAL_KERNELS = 14  # cat == "kernel" events in the file
HAND_GPU_FALLBACK = [118, 121, 122, 124, 125, 126]  # kernel starts inside the GPU range
PID = 597913


def _tables(path: Path, rejects: Rejects | None = None) -> dict[str, pa.Table]:
    r = rejects if rejects is not None else Rejects()
    return {s: pa.Table.from_batches([b]) for s, b in iter_kineto(path, r)}


def _variant(tmp_path: Path, name: str, edit: Any) -> Path:
    """The fixture with ``edit(events)`` applied, written as a synthetic copy."""
    doc = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    doc["traceEvents"] = edit(doc["traceEvents"])
    out = tmp_path / f"synthetic_{name}.json"
    out.write_text(json.dumps(doc))
    return out


def test_fixture_kernel_count_per_step_equals_hand_count() -> None:
    """Each kernel joins the CPU ProfilerStep range holding its launch call:
    the per-step counts (kernel rows and iteration kernel_count) equal the
    hand counts, and every kernel of the file is emitted."""
    t = _tables(FIXTURE)
    k, its = t["kernel_span"], t["iteration_span"]
    assert k.num_rows == HAND_TOTAL_KERNELS
    per_step: dict[int, int] = {n: 0 for n in HAND_STEP_KERNELS}
    for n in k["iteration"].to_pylist():
        per_step[n] += 1
    assert per_step == HAND_STEP_KERNELS
    rows = its.to_pylist()
    assert {r["iteration"]: r["kernel_count"] for r in rows} == HAND_STEP_KERNELS


def test_fixture_iteration_spans_are_the_cpu_step_ranges_in_ns() -> None:
    """One iteration_span per CPU ProfilerStep#N: start/end = base + ts/dur
    converted exactly from us to ns; pid = the step's event pid; model and
    pid equal the kernels' (the engine joins on them)."""
    t = _tables(FIXTURE)
    base = 1735632360000000000  # baseTimeNanoseconds
    rows = sorted(t["iteration_span"].to_pylist(), key=lambda r: r["iteration"])
    assert [r["iteration"] for r in rows] == [1, 2]
    assert rows[0]["start_ns"] == base + 4203669603187439
    assert rows[0]["duration_ns"] == 9288291
    assert rows[1]["start_ns"] == base + 4203669612512740
    assert rows[1]["end_ns"] == base + 4203669612512740 + 49073
    assert {r["pid"] for r in rows} == {PID} == set(t["kernel_span"]["pid"].to_pylist())
    model = kineto_model(FIXTURE)
    assert model == "mi250_minitoy_train_ROCm6_2_kineto"
    assert set(t["kernel_span"]["model"].to_pylist()) == {model}
    assert {r["model"] for r in rows} == {model} and {r["source"] for r in rows} == {"kineto"}


def test_launch_fields_are_unchanged_by_the_step_join() -> None:
    """launch_api_ns / launch_delay_ns still come from the launch join
    (corr 118: api dur 11.502 us, delay 771.648 - 764.349 = 7.299 us)."""
    k = _tables(FIXTURE)["kernel_span"].to_pylist()
    row = next(r for r in k if r["correlation_id"] == 118)
    assert (row["launch_api_ns"], row["launch_delay_ns"]) == (11502, 7299)


def test_kernels_launched_outside_every_step_have_null_iteration(tmp_path: Path) -> None:
    """ProfilerStep#1 cut to end at 604500.000 us: the 6 kernels launched
    before (corr 118-126) stay in step 1, the 8 launched after it have a null
    iteration, and step 1's kernel_count is 6."""
    def cut(ev: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in ev:
            if e.get("cat") == "user_annotation" and e.get("name") == "ProfilerStep#1":
                e["dur"] = 1312.561  # 603187.439 + 1312.561 = 604500.000
        return ev

    t = _tables(_variant(tmp_path, "step1_cut", cut))
    k = t["kernel_span"].to_pylist()
    inside = sorted(r["correlation_id"] for r in k if r["iteration"] == 1)
    assert inside == HAND_GPU_FALLBACK
    assert sum(r["iteration"] is None for r in k) == HAND_TOTAL_KERNELS - 6
    counts = {r["iteration"]: r["kernel_count"] for r in t["iteration_span"].to_pylist()}
    assert counts == {1: 6, 2: 0}


def test_without_launch_calls_kernels_fall_back_to_the_gpu_step_annotation(
        tmp_path: Path) -> None:
    """Launch events removed: a kernel whose start lies in the GPU-side
    ProfilerStep#1 annotation joins step 1 and takes the CPU step's pid; the
    others (starts after 604485.573 us) have null iteration and pid."""
    t = _tables(_variant(tmp_path, "no_launch",
                         lambda ev: [e for e in ev if e.get("cat") != "cuda_runtime"]))
    k = t["kernel_span"].to_pylist()
    joined = sorted(r["correlation_id"] for r in k if r["iteration"] == 1)
    assert joined == HAND_GPU_FALLBACK
    assert {r["pid"] for r in k if r["iteration"] == 1} == {PID}
    assert all(r["pid"] is None for r in k if r["iteration"] is None)
    assert all(r["launch_api_ns"] is None for r in k)
    assert {r["iteration"]: r["kernel_count"]
            for r in t["iteration_span"].to_pylist()} == {1: 6, 2: 0}


def test_repeated_step_range_is_counted_once_as_duplicate(tmp_path: Path) -> None:
    """The same ProfilerStep#N twice in one pid: the first range is kept, the
    second counted as duplicate_id; iterations stay 2."""
    def dup(ev: list[dict[str, Any]]) -> list[dict[str, Any]]:
        step = next(e for e in ev if e.get("name") == "ProfilerStep#2"
                    and e.get("cat") == "user_annotation")
        return [*ev, {**step, "cat": "cpu_op"}]

    r = Rejects()
    t = _tables(_variant(tmp_path, "dup_step", dup), r)
    assert t["iteration_span"].num_rows == 2
    assert r.counts == {"duplicate_id": 1}


def test_replay_of_the_kineto_file_publishes_kernels_and_iterations() -> None:
    """`replay` (load_paths) of the trace yields its 14 kernel spans and the
    2 ProfilerStep iteration spans, with distinct deterministic keys."""
    got = [(e.signal, e.key, e.batch.num_rows) for e in load_paths([FIXTURE])]
    assert [(s, n) for s, _, n in got] == [("kernel_span", 14), ("iteration_span", 2)]
    assert len({key for _, key, _ in got}) == 2

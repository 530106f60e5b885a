"""Every threshold of the drift detectors and the bottleneck rules, in one place.

Each constant states its unit and where its value comes from. "Measured"
means measured on the evaluation runs of ``benchmarks/eval_bottleneck.py`` /
``benchmarks/eval_drift.py`` (CPU onnxruntime on the 2-core CI machine, see
``docs/drift-and-bottlenecks.md`` for the numbers); everything else cites its
published source. Change a value here, never inline.

>>> 0 < MICRO_KERNEL_NS < MEAN_KERNEL_LONG_NS
True
"""

from __future__ import annotations

from typing import Final

# --------------------------------------------------------------- kernels / launch
MICRO_KERNEL_NS: Final = 10_000
"""ns. A kernel shorter than this is a *microkernel*. HIP kernel launch
latency on MI200/MI300 is a few µs to ~10 µs (AMD ROCm docs, "HIP performance
guidelines": launch overhead dominates kernels shorter than ~10 µs); a kernel
this short cannot amortise its own launch."""

MICRO_SHARE_LAUNCH: Final = 0.5
"""ratio. Launch-bound evidence when at least half of the kernels are
microkernels. Measured: chain-of-300-tiny-ops model 0.91-0.99, 1024² GEMM 0.0."""

LTS_LAUNCH: Final = 0.5
"""ratio (launch overhead / kernel time). Launch-bound evidence when the device
waits at least half as long on launches as it computes. Measured: tiny-op chain
1.1-2.1, GEMM 0.004."""

LTS_COMPUTE_MAX: Final = 0.1
"""ratio. Compute-bound evidence when launch overhead is under 10% of kernel time."""

ACTIVE_RATIO_LOW: Final = 0.6
"""ratio (device busy / wall). Launch-bound evidence when the device is idle
for more than 40% of the wall time (Holistic Trace Analysis, "idle time"
breakdown, treats idle > ~30-40% as host-bound). Measured: tiny-op chain 0.32."""

ACTIVE_RATIO_HIGH: Final = 0.8
"""ratio. Compute-/memory-bound work keeps the device busy >= 80% of the
wall time. Measured: GEMM 0.99."""

MEAN_KERNEL_LONG_NS: Final = 100_000
"""ns. Compute-bound evidence when the mean kernel lasts >= 100 µs, i.e. ten
times the launch latency above, so launches are fully hidden."""

KERNEL_RATE_LAUNCH_HZ: Final = 20_000.0
"""kernels/s. Launch-bound evidence: at ~5-10 µs per HIP launch a single
stream saturates its launch path near 1e5 launches/s; 2e4/s is already a
launch-dominated regime (weak evidence, weight 1)."""

# --------------------------------------------------------------- host scheduler
SII_CPU: Final = 0.10
"""ratio (run-queue wait / wall of active threads, :mod:`stream_analytics.sii`).
CPU-bound evidence when the workload threads spend >= 10% of their wall time
runnable but not running. Measured: idle machine 0.0001-0.0004; 3 busy loops
on 2 cores 0.5-0.6 (theory: 1 - cores/runnable = 0.5)."""

INVOL_SWITCH_RATE_HZ: Final = 50.0
"""involuntary context switches per second per active thread. CFS preempts a
runnable thread at the end of its slice (sched_min_granularity 0.75-3 ms), so
sustained contention gives hundreds per second; an uncontended busy thread
gets a few per second from the tick and kernel threads."""

# --------------------------------------------------------------- GPU activity
MEM_SHARE_MEMORY: Final = 0.55
"""ratio mem / (mem + gfx) of rocm-smi "GPU Memory Read/Write Activity" vs
"GPU use" (or of the cumulative "Memory Activity" vs "GFX Activity"
counters). Memory-bound evidence when the memory controller is busier than
the graphics engine. Fixtures: MI250 (wandb, ROCm 6) 0.63; R9700 at 100% gfx
with 4% memory 0.04."""

ROOFLINE_SHARE: Final = 0.5
"""share of the counter-profiled kernel time (or HBM bytes, when durations are
unknown) whose kernel families sit below (memory) or at/above (compute) the
roofline ridge point (``roofline.json`` ``summary``, exporter/roofline.py).
A majority decides: the roofline position is a direct measurement of the
kernels' arithmetic intensity against this GPU's ceilings, so its rules weigh
more than the activity-share heuristics."""

GFX_BUSY_HIGH: Final = 0.8
"""ratio. rocm-smi "GPU use (%)" / 100 at or above this is a busy GPU."""

THROTTLE_RESIDENCY: Final = 0.05
"""share of the window spent throttled: MI300 violation residency
(``hw.gpu.throttle.ratio``, worst reason) where reported, else the share of
samples with ``hw.gpu.throttled{reason="any"}`` = 1 (non-zero amdgpu
``gpu_metrics`` throttle bits: PPT, thermal, TDC, ...). Throttled evidence
at >= 5% residency."""

POWER_CAP_RATIO: Final = 0.95
"""ratio current / max graphics package power. At >= 95% of the cap the SMU
power-limits clocks (PPT throttling)."""

CLOCK_CV: Final = 0.05
"""coefficient of variation of the graphics clock over the window. A loaded,
unthrottled GPU holds its clock within a few %; DVFS throttling swings it."""

# --------------------------------------------------------------- regression verdicts
DIFF_ALPHA: Final = 0.01
"""one-sided Mann-Whitney U significance level for a latency regression."""

EVIDENCE_DELTA_PCT: Final = 10.0
"""% relative change of an evidence signal (KAR, LTS, family time) that makes
it a suspected cause of a regression."""

SII_DELTA_ABS: Final = 0.05
"""absolute SII increase that makes scheduler interference a suspected cause."""

ACTIVE_DELTA_ABS: Final = 0.05
"""absolute active-ratio change that makes device starvation a suspected cause."""

# --------------------------------------------------------------- drift detectors
DRIFT_GRACE_PERIOD: Final = 60
"""samples used to estimate the baseline (median, MAD) before testing; one
sample per analytics result (~1 s flush), so one minute. Measured: the window
evaluation of ``benchmarks/eval_drift.py`` (recordings of 260 flushes)."""

DRIFT_MIN_REL_SCALE: Final = 0.01
"""floor of the baseline's noise scale, relative to its level: sigma >=
1% of |median|. A drift alarm is for changes an operator acts on, and
device-side kernel durations are far steadier than that: real rocprof v1
traces (``collectors/rocprof/testdata``, 11 kernels with 100-1001
dispatches) have robust CVs of 0.10-0.97%, and with the former 0.1% floor
EWMA alarmed on sub-percent wobble of a 100-dispatch baseline (75 i.i.d. /
647 block-bootstrap false alarms per 100k on ``compute_fd_x_kernel``). With
the 1% floor a +5% step is >= 4 sigma (the clip) on every such series:
detected in 1-3 samples with no false alarm in 300,000 bootstrapped samples
each (``benchmarks/eval_drift_limits.py gpu``). Streams noisier than 1%
(CPU latency on a shared host: 3.6-5.5% per 1 s flush) are unaffected."""

DRIFT_STREAM_PARAMS: Final[dict[str, dict[str, float]]] = {"kar": {"min_rel_scale": 0.001}}
"""per-stream detector defaults over the class defaults (a detector spec's own
``params`` still win). KAR keeps a 0.1% floor: it is an exact ratio of
counts (kernels per graph node per iteration, 1.0105 = 96/95 for magika), so
one more or one fewer kernel per iteration (+-1%) is a real change of kernel
selection, not noise."""

DRIFT_CLIP_SIGMA: Final = 4.0
"""standardised samples are clipped to +-4 robust sigmas (Huber-style) so one
latency outlier cannot fire a chart; real latency series are heavy-tailed."""

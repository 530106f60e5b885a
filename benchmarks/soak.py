"""Soak test of the daemon: ``aaco-exporter run`` observing a real instrumented ORT server
for ``--duration`` seconds while ``/metrics`` is scraped ``--scrape-rate`` times a second.

What runs (all real, all on 127.0.0.1 with ephemeral ports, all stopped in ``finally``):

* the **served process**: ``aaco-exporter instrument -- python deploy/examples/ort_server.py
  --self-load RPS`` (the magika model from PyPI, ONNX Runtime CPU); its
  ``InferenceSession.run`` spans go over the bus;
* the **daemon**: ``aaco-exporter run --watch none --pid SERVER`` with its embedded
  nats-server (``--nats-listen``, a JetStream state dir in a temp dir), analytics and the
  Prometheus sink (``--metrics-addr``), host ``--host soak-<port>`` so nothing else on the
  machine shares its subjects;
* a **sampler**: every ``--sample-interval`` seconds the daemon's and its nats-server
  child's RSS (``VmRSS`` of ``/proc/PID/status``, bytes) and open fds (entries of
  ``/proc/PID/fd``, read while the scraper holds new scrapes and none is in flight, so
  scrape connections are not counted), the daemon's CPU seconds, the series count of
  ``/metrics`` (number of samples in one scrape) and the bytes of the JetStream store;
* a **scraper**: ``--scrape-clients`` threads issue exactly ``round(rate * duration)``
  scrapes on the schedule ``t0 + i / rate`` (a late one goes at once), each a new HTTP
  connection (``urllib``). Every response must be HTTP 200, parse with
  ``prometheus_client.parser.text_string_to_metric_families``, hold every family of
  :data:`EXPECTED_FAMILIES`, and no counter sample (``*_total``, histogram ``_count`` /
  ``_bucket``) may be lower than the highest value of that series seen by a scrape that
  *completed before this one was sent* (a linearizable monotonicity check across the
  concurrent clients). Each failure is counted by reason.

Judgement (:func:`judge`): after ``--warmup`` seconds, a least-squares line
(``scipy.stats.linregress``) through the samples gives the slope of each quantity per
hour: daemon RSS MiB/hour, daemon fds/hour, nats-server RSS MiB/hour, nats-server
fds/hour, series/hour. Each must be within its bound (``--max-*``); scrape failures must
be 0; the server's ``aaco_iterations_total`` must have grown (the daemon did its job).
The verdict and every figure go to ``--out`` (JSON) and stdout; exit status 1 when a
check fails.

``python benchmarks/soak.py --duration 3600 --out /tmp/soak.json`` (one hour; the
default) or ``--duration 180`` (the CI variant, ``tests/benchmarks/test_soak.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import stop_process  # noqa: E402

MIB = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")

EXPECTED_FAMILIES = (
    "aaco_iterations",
    "aaco_iteration_latency_seconds",
    "aaco_scheduler_interference_ratio",
    "aaco_watched_process_info",
    "aaco_sched_cpu_seconds",
    "aaco_sched_context_switches",
    "aaco_graph_nodes",
    "aaco_exporter_events_dropped",
)
"""Families (``prometheus_client`` family names: counters without ``_total``) that every
``/metrics`` response must hold once the daemon has seen the server's first window."""

DEFAULT_BOUNDS = {
    "daemon_rss_mib": 16.0,
    "daemon_fds": 2.0,
    "nats_rss_mib": 32.0,
    "nats_fds": 2.0,
    "series": 2.0,
}
"""Largest allowed least-squares slope per hour after the warm-up, by quantity (MiB/hour,
fds/hour, series/hour)."""

STEP_TOLERANT = frozenset({"daemon_rss_mib", "nats_rss_mib"})
"""Quantities judged on sustained growth, not on one step (see :func:`judge`)."""
UNITS = {"daemon_rss_mib": "MiB/hour", "daemon_fds": "fds/hour", "nats_rss_mib": "MiB/hour",
         "nats_fds": "fds/hour", "series": "series/hour"}


# -- /proc ---------------------------------------------------------------------------------
def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ProcessLookupError(pid)


def open_fds(pid: int, reads: int = 5, gap_s: float = 0.02) -> int:
    """Open file descriptors of ``pid``: the fewest entries of ``/proc/PID/fd`` over
    ``reads`` reads ``gap_s`` apart.

    The minimum leaves out the sockets of scrapes in flight at one instant; a leaked fd
    stays open and is counted by every read.
    """
    n = len(os.listdir(f"/proc/{pid}/fd"))
    for _ in range(reads - 1):
        time.sleep(gap_s)
        n = min(n, len(os.listdir(f"/proc/{pid}/fd")))
    return n


def tree_bytes(path: Path) -> int:
    """Total size in bytes of the regular files under ``path`` (the JetStream store)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_size
            except OSError:
                continue
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (fields 14, 15 of ``/proc/PID/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (``/proc/PID/task/*/children``)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


# -- scraping ------------------------------------------------------------------------------
def fetch(url: str, timeout: float = 10.0) -> str:
    """GET ``url`` on a new connection; the body as text. Raises ``OSError`` (HTTP errors
    included) on failure."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        if r.status != 200:
            raise OSError(f"HTTP {r.status}")
        return str(r.read().decode())


Key = tuple[str, tuple[tuple[str, str], ...]]
"""A series: sample name and sorted label pairs."""


def parse(text: str) -> tuple[set[str], dict[Key, float], set[Key]]:
    """Parse an exposition: (names of the families that have samples, monotonic samples by
    series, every series).

    A family with no sample (its ``# HELP`` and ``# TYPE`` lines only) is not counted as
    present. Monotonic samples are those of counter families (``*_total``; ``_created`` is a
    timestamp and left out) and the ``_count`` / ``_bucket`` samples of histograms.
    Raises ``ValueError`` when the text does not parse.
    """
    from prometheus_client.parser import text_string_to_metric_families

    families: set[str] = set()
    mono: dict[Key, float] = {}
    keys: set[Key] = set()
    for fam in text_string_to_metric_families(text):
        if fam.samples:
            families.add(fam.name)
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            keys.add(key)
            if (fam.type == "counter" and s.name.endswith("_total")) or (
                    fam.type == "histogram" and s.name.endswith(("_count", "_bucket"))):
                mono[key] = float(s.value)
    return families, mono, keys


@dataclass
class ScrapeStats:
    """What the scraper saw: scrapes planned, sent (``attempted``) and answered with text
    that parsed (``done``), failures by reason, the first failure messages, how late the
    latest scrape went (s) and how many counter samples were compared."""

    planned: int = 0
    attempted: int = 0
    done: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    first_errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    max_late_s: float = 0.0
    counters_checked: int = 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failures"] = dict(self.failures)
        d["failures_total"] = sum(self.failures.values())
        d["achieved_rate_per_s"] = self.done / self.elapsed_s if self.elapsed_s else 0.0
        return d


class Scraper:
    """``clients`` threads scraping ``url`` ``total`` times at ``rate`` per second.

    Monotonicity: before a request the client takes a copy of ``floor`` (the highest value
    of each monotonic series in responses completed so far); its response must be at least
    that, series by series; afterwards ``floor`` is raised to the response's values.
    A series absent from a response is not judged (the sink drops stale series).
    """

    def __init__(self, url: str, rate: float, total: int, clients: int,
                 expected: Sequence[str] = EXPECTED_FAMILIES) -> None:
        self.url, self.rate, self.clients = url, rate, clients
        self.expected = frozenset(expected)
        self.stats = ScrapeStats(planned=total)
        self._lock = threading.Lock()
        self._floor: dict[Key, float] = {}
        self._next = 0
        self._t0 = 0.0
        self._go = threading.Event()  # cleared while paused
        self._go.set()
        self._idle = threading.Condition(self._lock)
        self._inflight = 0

    @contextmanager
    def paused(self, timeout_s: float = 10.0) -> Iterator[None]:
        """Hold new scrapes and wait (at most ``timeout_s``) until none is in flight, so a
        reading of the daemon's fds sees no scrape connection; the schedule catches up
        afterwards (late scrapes go at once)."""
        self._go.clear()
        try:
            with self._idle:
                self._idle.wait_for(lambda: self._inflight == 0, timeout_s)
            yield
        finally:
            self._go.set()

    def _fail(self, reason: str, msg: str) -> None:
        with self._lock:
            self.stats.failures[reason] += 1
            if len(self.stats.first_errors) < 10:
                self.stats.first_errors.append(f"{reason}: {msg}"[:300])

    def _take(self) -> int | None:
        with self._lock:
            i = self._next
            if i >= self.stats.planned:
                return None
            self._next += 1
            return i

    def _one(self) -> None:
        with self._lock:
            floor = dict(self._floor)
            self.stats.attempted += 1
        try:
            text = fetch(self.url)
        except OSError as e:
            self._fail("http", repr(e))
            return
        try:
            fams, mono, _ = parse(text)
        except Exception as e:  # the parser raises ValueError and others on bad text
            self._fail("parse", repr(e))
            return
        missing = self.expected - fams
        if missing:
            self._fail("incomplete", f"missing {sorted(missing)}")
        lower = [(k, floor[k], v) for k, v in mono.items() if k in floor and v < floor[k]]
        if lower:
            self._fail("counter_decreased", f"{len(lower)} series, e.g. {lower[0]}")
        with self._lock:
            self.stats.counters_checked += len(mono)
            for k, v in mono.items():
                if v > self._floor.get(k, float("-inf")):
                    self._floor[k] = v
            self.stats.done += 1

    def _client(self) -> None:
        while (i := self._take()) is not None:
            due = self._t0 + i / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            while True:
                self._go.wait()
                with self._lock:
                    if self._go.is_set():  # paused() clears it under no lock: re-check
                        self._inflight += 1
                        self.stats.max_late_s = max(self.stats.max_late_s,
                                                    time.monotonic() - due)
                        break
            try:
                self._one()
            finally:
                with self._idle:
                    self._inflight -= 1
                    self._idle.notify_all()

    def run(self) -> ScrapeStats:
        """Issue every planned scrape; returns when the last has completed."""
        self._t0 = time.monotonic()
        threads = [threading.Thread(target=self._client, name=f"scrape-{k}", daemon=True)
                   for k in range(self.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.stats.elapsed_s = time.monotonic() - self._t0
        return self.stats


# -- sampling and judgement ----------------------------------------------------------------
@dataclass
class Sample:
    """One sample: seconds since the soak started, RSS (bytes) and fds of the daemon and
    its nats-server, the daemon's CPU seconds, /metrics sample count, bytes of the
    JetStream store on disk."""

    t: float
    daemon_rss: int
    daemon_fds: int
    nats_rss: int
    nats_fds: int
    daemon_cpu_s: float
    series: int
    store_bytes: int


def slope_per_hour(ts: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope of ``ys`` against ``ts`` (seconds), per hour, and its standard
    error per hour (``scipy.stats.linregress``). Needs at least 3 points."""
    from scipy.stats import linregress

    if len(ts) < 3:
        raise ValueError(f"{len(ts)} samples after the warm-up; need at least 3")
    if len(set(ys)) == 1:
        return 0.0, 0.0
    r = linregress(ts, ys)
    return float(r.slope) * 3600, float(r.stderr) * 3600


def judge(samples: Sequence[Sample], warmup_s: float, scrapes: ScrapeStats,
          bounds: dict[str, float], iterations: tuple[float, float]) -> dict[str, Any]:
    """Slopes after ``warmup_s`` against ``bounds``, scrape failures, load progress.

    Returns ``{"ok": bool, "checks": {name: {...}}, "slopes": {...}}``; slopes are per
    hour in the units of :data:`UNITS`.

    RSS (:data:`STEP_TOLERANT`) fails only on sustained growth: the whole fit's
    slope and the slopes of both its halves above the bound. A leak grows in
    both halves; a one-time step of the allocator (an arena or memory pool
    growing once: +2 MiB mid-fit reads as 60 MiB/hour over a 2-minute fit)
    lifts one half only. fds and series stay strict: one fd opened for good
    fails.
    """
    fit = [s for s in samples if s.t >= warmup_s]
    ts = [s.t for s in fit]
    series_of = {
        "daemon_rss_mib": [s.daemon_rss / MIB for s in fit],
        "daemon_fds": [float(s.daemon_fds) for s in fit],
        "nats_rss_mib": [s.nats_rss / MIB for s in fit],
        "nats_fds": [float(s.nats_fds) for s in fit],
        "series": [float(s.series) for s in fit],
    }
    checks: dict[str, dict[str, Any]] = {}
    slopes: dict[str, dict[str, Any]] = {}
    for name, ys in series_of.items():
        slope, err = slope_per_hour(ts, ys)
        slopes[name] = {"slope": slope, "stderr": slope and err, "unit": UNITS[name],
                        "first": ys[0], "last": ys[-1], "min": min(ys), "max": max(ys)}
        ok = slope <= bounds[name]
        if not ok and name in STEP_TOLERANT and len(ts) >= 6:
            h = len(ts) // 2
            halves = [slope_per_hour(ts[:h], ys[:h])[0], slope_per_hour(ts[h:], ys[h:])[0]]
            slopes[name]["halves"] = halves
            ok = min(halves) <= bounds[name]  # growth in one half only: a step, no leak
        checks[f"slope_{name}"] = {"ok": ok, "value": slope,
                                   "bound": bounds[name], "unit": UNITS[name]}
    fails = sum(scrapes.failures.values())
    checks["scrape_failures"] = {"ok": fails == 0, "value": fails, "bound": 0}
    checks["scrapes_done"] = {"ok": scrapes.attempted == scrapes.planned,
                              "value": scrapes.attempted, "bound": scrapes.planned}
    checks["iterations_grew"] = {"ok": iterations[1] > iterations[0],
                                 "value": list(iterations)}
    return {"ok": all(c["ok"] for c in checks.values()), "checks": checks, "slopes": slopes,
            "fit_samples": len(fit)}


# -- the processes -------------------------------------------------------------------------
def _free_port() -> int:
    from exporter.natsserver import free_port

    return free_port()


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


@dataclass
class Stack:
    """The running served process and daemon, their ports and log files."""

    server: subprocess.Popen[bytes]
    daemon: subprocess.Popen[bytes]
    nats_pid: int
    metrics_url: str
    host: str
    logdir: Path


@contextmanager
def stack(workdir: Path, *, self_load: float, window_s: float,
          ready_timeout_s: float = 180.0) -> Iterator[Stack]:
    """Start the instrumented ORT server and ``run`` watching it; yield once ``/metrics``
    holds every :data:`EXPECTED_FAMILIES`; stop both (SIGTERM, then SIGKILL) on exit.

    Raises ``RuntimeError`` with the daemon's log tail when it exits or is not ready in
    ``ready_timeout_s``.
    """
    aaco = str(Path(sys.executable).parent / "aaco-exporter")
    nats_port, metrics_port, server_port = _free_port(), _free_port(), _free_port()
    host = f"soak-{metrics_port}"
    env = dict(_env(), AACO_NATS_URL=f"nats://127.0.0.1:{nats_port}", AACO_HOST=host)
    dlog = (workdir / "daemon.log").open("wb")
    slog = (workdir / "server.log").open("wb")
    server = daemon = None
    try:
        server = subprocess.Popen(
            [aaco, "instrument", "--", sys.executable,
             str(ROOT / "deploy" / "examples" / "ort_server.py"), "--port", str(server_port),
             "--self-load", str(self_load)],
            env=env, stdin=subprocess.DEVNULL, stdout=slog, stderr=subprocess.STDOUT)
        daemon = subprocess.Popen(
            [aaco, "run", "--watch", "none", "--pid", str(server.pid),
             "--nats-listen", f"127.0.0.1:{nats_port}",
             "--metrics-addr", f"127.0.0.1:{metrics_port}", "--host", host,
             "--window", str(window_s), "--state-dir", str(workdir / "nats"),
             "--log-level", "WARNING"],
            env=_env(), stdin=subprocess.DEVNULL, stdout=dlog, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        deadline = time.monotonic() + ready_timeout_s
        missing: set[str] = set(EXPECTED_FAMILIES)
        while True:
            for p, name in ((daemon, "daemon"), (server, "server")):
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}): "
                                       + (workdir / f"{name}.log").read_text()[-2000:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"/metrics lacks {sorted(missing)} after "
                                   f"{ready_timeout_s} s: "
                                   + (workdir / "daemon.log").read_text()[-2000:])
            try:
                fams, _, _ = parse(fetch(url, timeout=3))
                missing = set(EXPECTED_FAMILIES) - fams
                if not missing:
                    break
            except OSError:
                pass
            time.sleep(1.0)
        nats = [c for c in child_pids(daemon.pid) if comm(c) == "nats-server"]
        if len(nats) != 1:
            raise RuntimeError(f"expected one nats-server child of the daemon, found {nats}")
        yield Stack(server, daemon, nats[0], url, host, workdir)
    finally:
        stop_process(daemon, 30, 10)
        stop_process(server, 30, 10)
        dlog.close()
        slog.close()


def iterations_of(url: str, pid: int) -> float:
    """``aaco_iterations_total`` of ``pid`` in one scrape of ``url`` (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for fam in text_string_to_metric_families(fetch(url)):
        for s in fam.samples:
            if s.name == "aaco_iterations_total" and s.labels.get("pid") == str(pid):
                total += s.value
    return total


def soak(duration_s: float, *, scrape_rate: float = 50.0, scrape_clients: int = 16,
         sample_interval_s: float = 5.0, warmup_s: float | None = None,
         self_load: float = 20.0, window_s: float = 30.0,
         bounds: dict[str, float] | None = None, workdir: Path | None = None,
         series_ignore: Sequence[str] = (), progress: bool = True) -> dict[str, Any]:
    """Run the soak; return the report (samples, scrape stats, slopes, verdict).

    ``warmup_s`` defaults to a sixth of the duration, at most 600 s; samples before it
    are reported but not fitted. ``series_ignore``: sample names left out of the series
    count (for a short run, families born once per detector at its first event, such as
    ``aaco_drift_last_change_timestamp_seconds``, bounded by construction).
    """
    bounds = {**DEFAULT_BOUNDS, **(bounds or {})}
    warm = min(600.0, duration_s / 6) if warmup_s is None else warmup_s
    with tempfile.TemporaryDirectory(prefix="aaco-soak-") as tmp:
        wd = workdir or Path(tmp)
        wd.mkdir(parents=True, exist_ok=True)
        with stack(wd, self_load=self_load, window_s=window_s) as st:
            dpid, npid = st.daemon.pid, st.nats_pid
            it0 = iterations_of(st.metrics_url, st.server.pid)
            total = round(scrape_rate * duration_s)
            scraper = Scraper(st.metrics_url, scrape_rate, total, scrape_clients)
            samples: list[Sample] = []
            sample_errors: list[str] = []
            ignored = frozenset(series_ignore)
            first_keys: set[Key] = set()  # series of the first fitted sample
            last_keys: set[Key] = set()
            done = threading.Event()
            t0 = time.monotonic()

            def sampler() -> None:
                k = 0
                while not done.is_set():
                    t = time.monotonic() - t0
                    try:
                        _, _, keys = parse(fetch(st.metrics_url))
                        keys = {k for k in keys if k[0] not in ignored}
                        with scraper.paused():
                            time.sleep(0.02)  # the daemon closes its side after the reply
                            fds = open_fds(dpid, 3, 0.01), open_fds(npid, 1)
                        samples.append(Sample(t, rss_bytes(dpid), fds[0], rss_bytes(npid),
                                              fds[1], cpu_seconds(dpid), len(keys),
                                              tree_bytes(wd / "nats")))
                        if t >= warm and not first_keys:
                            first_keys.update(keys)
                        last_keys.clear()
                        last_keys.update(keys)
                        if progress and len(samples) % 12 == 1:
                            s = samples[-1]
                            print(f"t={t:7.0f}s daemon {s.daemon_rss / MIB:6.1f} MiB "
                                  f"{s.daemon_fds} fds | nats {s.nats_rss / MIB:6.1f} MiB "
                                  f"{s.nats_fds} fds store {s.store_bytes / MIB:.1f} MiB | "
                                  f"series {s.series} | scrapes "
                                  f"{scraper.stats.done} fail "
                                  f"{sum(scraper.stats.failures.values())}", flush=True)
                    except (OSError, ValueError) as e:
                        sample_errors.append(f"t={t:.0f}: {e!r}")
                    k += 1
                    done.wait(max(0.0, t0 + k * sample_interval_s - time.monotonic()))

            th = threading.Thread(target=sampler, name="sampler", daemon=True)
            th.start()
            stats = scraper.run()
            done.set()
            th.join()
            elapsed = time.monotonic() - t0
            it1 = iterations_of(st.metrics_url, st.server.pid)
            alive = st.daemon.poll() is None
        verdict = judge(samples, warm, stats, bounds, (it0, it1))
        verdict["checks"]["daemon_alive"] = {"ok": alive, "value": alive}
        verdict["ok"] = verdict["ok"] and alive
        cpu = samples[-1].daemon_cpu_s - samples[0].daemon_cpu_s if samples else 0.0
        span = samples[-1].t - samples[0].t if len(samples) > 1 else 0.0
        return {
            "duration_s": elapsed, "planned_duration_s": duration_s, "warmup_s": warm,
            "sample_interval_s": sample_interval_s, "samples": len(samples),
            "sample_errors": sample_errors, "self_load_rps": self_load,
            "scrape_rate": scrape_rate, "scrape_clients": scrape_clients,
            "scrapes": stats.as_dict(), "iterations": {"start": it0, "end": it1},
            "series": {"start": samples[0].series if samples else None,
                       "end": samples[-1].series if samples else None,
                       "added_after_warmup": sorted(map(str, last_keys - first_keys)),
                       "gone_after_warmup": sorted(map(str, first_keys - last_keys))},
            "store_bytes": {"start": samples[0].store_bytes if samples else None,
                            "end": samples[-1].store_bytes if samples else None},
            "daemon_cpu_cores": cpu / span if span else None,
            "bounds_per_hour": bounds, "series_ignored": list(series_ignore),
            "ok": verdict["ok"], "verdict": verdict,
            "python": sys.version.split()[0], "cpus": os.cpu_count(),
            "load_avg_end": os.getloadavg(),
            "trace": [asdict(s) for s in samples],
        }


def summary(rep: dict[str, Any]) -> str:
    """The report as a short table (what README's figures come from)."""
    sc = rep["scrapes"]
    lines = [
        f"duration {rep['duration_s']:.0f} s, warm-up {rep['warmup_s']:.0f} s, "
        f"{rep['samples']} samples every {rep['sample_interval_s']:g} s "
        f"({rep['verdict']['fit_samples']} fitted)",
        f"scrapes {sc['done']}/{sc['planned']} by {rep['scrape_clients']} clients, "
        f"{sc['achieved_rate_per_s']:.1f}/s (target {rep['scrape_rate']:g}/s), "
        f"failures {sc['failures_total']} {sc['failures']}, "
        f"counter samples checked {sc['counters_checked']}",
        f"iterations {rep['iterations']['start']:.0f} -> {rep['iterations']['end']:.0f}, "
        f"series {rep['series']['start']} -> {rep['series']['end']}, daemon CPU "
        f"{(rep['daemon_cpu_cores'] or 0):.2f} cores, JetStream store "
        f"{(rep['store_bytes']['start'] or 0) / MIB:.1f} -> "
        f"{(rep['store_bytes']['end'] or 0) / MIB:.1f} MiB",
        f"series added after the warm-up: {rep['series']['added_after_warmup'][:5]}, "
        f"gone: {rep['series']['gone_after_warmup'][:5]}",
        f"{'quantity':<16}{'first':>10}{'last':>10}{'slope':>12}{'stderr':>10}"
        f"{'bound':>9}  unit       ok",
    ]
    for name, s in rep["verdict"]["slopes"].items():
        c = rep["verdict"]["checks"][f"slope_{name}"]
        lines.append(f"{name:<16}{s['first']:>10.1f}{s['last']:>10.1f}{s['slope']:>12.2f}"
                     f"{s['stderr']:>10.2f}{c['bound']:>9g}  {s['unit']:<10} {c['ok']}")
    bad = [k for k, c in rep["verdict"]["checks"].items() if not c["ok"]]
    lines.append("PASS" if rep["ok"] else f"FAIL: {bad}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds of soak")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds not fitted (default: duration/6, at most 600)")
    ap.add_argument("--scrape-rate", type=float, default=50.0, help="scrapes per second")
    ap.add_argument("--scrape-clients", type=int, default=16, help="concurrent scrapers")
    ap.add_argument("--sample-interval", type=float, default=5.0, help="seconds")
    ap.add_argument("--self-load", type=float, default=20.0,
                    help="requests/s the served process sends itself")
    ap.add_argument("--window", type=float, default=30.0, help="analytics window, seconds")
    for name, unit in UNITS.items():
        ap.add_argument(f"--max-{name.replace('_', '-')}", type=float,
                        default=DEFAULT_BOUNDS[name], help=f"bound on the slope, {unit}")
    ap.add_argument("--out", type=Path, default=None, help="report JSON")
    a = ap.parse_args(argv)
    bounds = {name: getattr(a, f"max_{name}") for name in UNITS}
    rep = soak(a.duration, scrape_rate=a.scrape_rate, scrape_clients=a.scrape_clients,
               sample_interval_s=a.sample_interval, warmup_s=a.warmup,
               self_load=a.self_load, window_s=a.window, bounds=bounds)
    text = summary(rep)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(rep, indent=1))
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

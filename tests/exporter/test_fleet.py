"""Host-scoped fleet bus (issue 11): on one shared nats-server each node daemon
folds in and exports only its own host; results go to their host's subject;
``aggregate`` serves every host once, host-labelled."""

from __future__ import annotations

import asyncio
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from nats.js.errors import NotFoundError
from prometheus_client.parser import text_string_to_metric_families

from exporter import schema
from exporter.bus import Bus, BusConfig
from exporter.fleet import host_subjects, split_by_host
from exporter.natsserver import EmbeddedNats, free_port
from exporter.sinks.prometheus import PromState
from stream_analytics.consumer import INPUTS, AnalyticsConsumer

T0 = time.time_ns()


def _iterations(n: int, pid: int, model: str = "m") -> pa.Table:
    """``n`` back-to-back 1 ms iteration spans of ``pid`` running ``model``."""
    ms = 1_000_000
    return pa.Table.from_pylist([
        {"start_ns": T0 + i * ms, "end_ns": T0 + (i + 1) * ms, "duration_ns": ms,
         "source": "ort", "model": model, "pid": pid, "iteration": i, "kernel_count": 0}
        for i in range(n)], schema=schema.ITERATION_SPAN)


def _sched(n: int, pid: int) -> pa.Table:
    """``n`` samples of one thread of ``pid``: each 1 s on CPU, 0.25 s waiting."""
    return pa.Table.from_pylist([
        {"ts_ns": T0 + i, "interval_ns": 1_000_000_000, "source": "proc", "pid": pid,
         "tid": pid, "comm": "w", "runq_wait_ns": 250_000_000, "run_ns": 1_000_000_000,
         "voluntary_switches": 1, "involuntary_switches": 2}
        for i in range(n)], schema=schema.SCHED_SAMPLE)


def _power(watts: float) -> pa.Table:
    return pa.Table.from_pylist([
        {"ts_ns": T0, "metric": "hw.gpu.power", "value": watts, "kind": "gauge", "unit": "W",
         "source": "test", "gpu_index": 0, "gpu_uuid": None, "attributes": []}],
        schema=schema.GAUGE_SAMPLE)


# -- unit: subjects, splitting, label hygiene ----------------------------------

def test_host_subjects_are_one_sanitised_token_plus_partition_form() -> None:
    """A host name becomes one subject token; a partitioned stream adds `<host>.*`."""
    assert host_subjects("iteration_span", "gpu.node 7") == ["aaco.v1.iteration_span.gpu_node_7"]
    assert host_subjects("sched_sample", "a", partitions=3) == [
        "aaco.v1.sched_sample.a", "aaco.v1.sched_sample.a.*"]


def test_split_by_host_groups_rows_keeps_order_and_routes_null_to_default() -> None:
    """Rows are grouped by sanitised host, sorted; a null host goes to the default."""
    t = pa.table({"host": ["b", "a.x", None, "b"], "v": [1, 2, 3, 4]})
    got = [(h, rows.column("v").to_pylist()) for h, rows in split_by_host(t, "self")]
    assert got == [("a_x", [2]), ("b", [1, 4]), ("self", [3])]
    assert split_by_host(t.slice(0, 0), "self") == []


def test_split_by_host_of_one_host_gives_the_table_itself() -> None:
    """One host (a node's daemon; null rows included when the default is that
    host): one group holding every row in order, the table itself, unfiltered."""
    t = pa.table({"host": ["n.1", None, "n.1"], "v": [1, 2, 3]})
    ((host, rows),) = split_by_host(t, "n.1")
    assert (host, rows.column("v").to_pylist()) == ("n_1", [1, 2, 3])
    assert rows is t


def test_gauge_attribute_named_host_cannot_override_the_host_label() -> None:
    """A GPU attribute `host` never replaces the message's host, so hosts never collide."""
    t = _power(5.0).set_column(8, "attributes", pa.array(
        [[("host", "evil"), ("hw.gpu.task", "x")]], pa.map_(pa.string(), pa.string())))
    st = PromState()
    st.ingest("gauge_sample", "node-a", t.to_batches()[0])
    samples = [s for f in st.collect() for s in f.samples]
    assert [s.labels for s in samples] == [
        {"gpu_index": "0", "host": "node-a", "hw_gpu_task": "x"}]


# -- the consumer: host filter, per-host results --------------------------------

async def _publish_as(url: str, cfg: BusConfig, host: str, signal: str, t: pa.Table,
                      key: str) -> None:
    bus = await Bus.open(url, cfg, host)
    try:
        await bus.publish_table(signal, t, key)
    finally:
        await bus.close()


@pytest.mark.parametrize("partitions", [1, 2])
def test_consumer_for_host_a_never_folds_messages_of_host_b(
        nats_server: EmbeddedNats, partitions: int) -> None:
    """`AnalyticsConsumer(hosts=["a"])` filters `aaco.v1.<input>.a` (and `.a.*` on a
    partitioned stream): of 4 iterations from a and 7 from b it folds exactly a's."""
    url, cfg = nats_server.url, BusConfig(partitions=partitions)

    async def go() -> tuple[list[str], Counter[str], dict[tuple[str, int, str], int]]:
        await _publish_as(url, cfg, "a", "iteration_span", _iterations(4, 1001), "a:i")
        await _publish_as(url, cfg, "b", "iteration_span", _iterations(7, 1002), "b:i")
        await _publish_as(url, cfg, "b", "sched_sample", _sched(3, 1002), "b:s")
        bus = await Bus.open(url, cfg, "a")
        try:
            c = AnalyticsConsumer(bus, durable="only-a", window_s=None, checkpoint=False,
                                  hosts=["a"])
            await c.start()
            await c.drain()
            return (c.filter_subjects(), c.received,
                    {k: st.iterations_total for k, st in c.engine.keys.items()})
        finally:
            await bus.close()

    filters, received, keys = asyncio.run(go())
    assert filters == [f for s in INPUTS for f in host_subjects(s, "a", partitions)]
    assert received == Counter({"iteration_span": 1})
    assert keys == {("a", 1001, "m"): 4}


def test_existing_all_hosts_durable_is_narrowed_to_its_host_on_start(
        nats_server: EmbeddedNats) -> None:
    """A durable created reading every host (an upgraded daemon's) gets the host
    filter at start, so it stops folding other hosts in."""
    url, cfg = nats_server.url, BusConfig()

    async def go() -> tuple[list[str], Counter[str]]:
        bus = await Bus.open(url, cfg, "a")
        try:
            old = AnalyticsConsumer(bus, durable="upgraded", window_s=None, checkpoint=False)
            await old.start()
            await _publish_as(url, cfg, "a", "iteration_span", _iterations(2, 1), "a:i")
            await _publish_as(url, cfg, "b", "iteration_span", _iterations(3, 2), "b:i")
            new = AnalyticsConsumer(bus, durable="upgraded", window_s=None, checkpoint=False,
                                    hosts=["a"])
            await new.start()
            await new.drain()
            info = await bus.js.consumer_info(cfg.stream, "upgraded")
            return sorted(info.config.filter_subjects or []), new.received
        finally:
            await bus.close()

    filters, received = asyncio.run(go())
    assert filters == sorted(f"aaco.v1.{s}.a" for s in INPUTS)
    assert received == Counter({"iteration_span": 1})


def test_one_worker_serving_two_hosts_publishes_each_hosts_results_on_its_subject(
        nats_server: EmbeddedNats) -> None:
    """A standalone worker (bus host "worker") computing results for hosts a and b
    publishes a's rows on `aaco.v1.<signal>.a` and b's on `....b`, nothing on
    `....worker`, with deterministic message ids ending in `:<host>:<chunk>`."""
    url, cfg = nats_server.url, BusConfig()

    async def go() -> tuple[dict[str, int], dict[str, list[tuple[str, int]]], list[str]]:
        await _publish_as(url, cfg, "a", "iteration_span", _iterations(4, 1001), "a:i")
        await _publish_as(url, cfg, "b", "iteration_span", _iterations(7, 1002), "b:i")
        bus = await Bus.open(url, cfg, "worker")
        try:
            c = AnalyticsConsumer(bus, durable="fleet-worker", window_s=None,
                                  checkpoint=False)
            await c.start()
            await c.drain()
            info = await bus.js.stream_info(cfg.stream, subjects_filter="aaco.v1.>")
            subjects = dict(info.state.subjects or {})
            last: dict[str, list[tuple[str, int]]] = {}
            ids = []
            for h in ("a", "b"):
                msg = await bus.js.get_last_msg(cfg.stream, f"aaco.v1.analytics_result.{h}")
                assert msg.headers is not None and msg.data is not None
                ids.append(msg.headers[schema.H_MSG_ID])
                rows = schema.decode(msg.data, msg.headers)[3].to_pylist()
                last[h] = [(r["host"], r["iterations_total"]) for r in rows]
            with pytest.raises(NotFoundError):
                await bus.js.get_last_msg(cfg.stream, "aaco.v1.analytics_result.worker")
            return subjects, last, ids
        finally:
            await bus.close()

    subjects, last, ids = asyncio.run(go())
    results = {s for s in subjects if s.split(".")[2] in
               ("analytics_result", "drift_status", "bottleneck")}
    assert {s.split(".")[3] for s in results} == {"a", "b"}
    assert {"aaco.v1.analytics_result.a", "aaco.v1.analytics_result.b"} <= results
    assert last == {"a": [("a", 4)], "b": [("b", 7)]}
    assert [i.rsplit(":", 2)[1:] for i in ids] == [["a", "0"], ["b", "0"]]
    assert all(i.startswith("fleet-worker:") for i in ids)


# -- end to end: two node daemons and an aggregator on one nats-server ----------

def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return str(r.read().decode())


def _samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            yield s.name, dict(s.labels), float(s.value)


def _value(text: str, name: str, **labels: str) -> float | None:
    vals = [v for n, lab, v in _samples(text)
            if n == name and all(lab.get(k) == x for k, x in labels.items())]
    assert len(vals) <= 1, (name, labels, vals)
    return vals[0] if vals else None


def _wait_up(port: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0].decode()[-2000:]
        try:
            _scrape(port)
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"/metrics on {port} did not come up")


def _wait_for(port: int, want: dict[tuple[str, str, str], float], deadline: float) -> str:
    """Scrape until every (name, host, pid) series has its value; return the text."""
    text = ""
    while time.monotonic() < deadline:
        text = _scrape(port)
        if all(_value(text, n, host=h, pid=p) == v for (n, h, p), v in want.items()):
            return text
        time.sleep(0.3)
    got = {k: _value(text, k[0], host=k[1], pid=k[2]) for k in want}
    raise AssertionError(f"port {port}: want {want}, got {got}")


async def _publish_fleet(url: str) -> None:
    cfg = BusConfig(url=url)
    for host, n, pid, samples, watts in (("node-a", 40, 1001, 3, 100.0),
                                         ("node-b", 60, 1002, 5, 200.0)):
        bus = await Bus.open(url, cfg, host=host)
        try:
            await bus.publish_table("iteration_span", _iterations(n, pid), f"{host}:it")
            await bus.publish_table("sched_sample", _sched(samples, pid), f"{host}:sched")
            await bus.publish_table("gauge_sample", _power(watts), f"{host}:gpu")
        finally:
            await bus.close()


@pytest.mark.slow
def test_node_daemons_export_only_their_host_and_aggregate_sums_each_host_once(
        nats_server: EmbeddedNats, cli_env: dict[str, str], aaco: str) -> None:
    """`run --host node-a` and `run --host node-b` on one nats-server: node-a's
    /metrics has aaco_iterations_total 40 and no node-b series, node-b's 60 and
    no node-a series; `aggregate` has both, host-labelled, and
    sum(aaco_iterations_total) == 100 (not 200), sched CPU seconds 3 + 5."""
    url = nats_server.url
    ports = {"node-a": free_port(), "node-b": free_port(), "aggregate": free_port()}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    common = ["--nats", url, "--log-level", "WARNING"]
    try:
        for host in ("node-a", "node-b"):
            procs[host] = subprocess.Popen(
                # --watch none: the fleet is the published data alone, not this
                # machine's ORT processes (pytest itself has onnxruntime loaded)
                [aaco, "run", *common, "--host", host, "--metrics-addr",
                 f"127.0.0.1:{ports[host]}", "--window", "30", "--watch", "none"],
                env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs["aggregate"] = subprocess.Popen(
            [aaco, "aggregate", *common, "--metrics-addr", f"127.0.0.1:{ports['aggregate']}"],
            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90  # three interpreters start on a busy machine
        for name, port in ports.items():
            _wait_up(port, procs[name], deadline)
        asyncio.run(_publish_fleet(url))

        deadline = time.monotonic() + 60
        a = {("aaco_iterations_total", "node-a", "1001"): 40.0,
             ("aaco_sched_cpu_seconds_total", "node-a", "1001"): 3.0}
        b = {("aaco_iterations_total", "node-b", "1002"): 60.0,
             ("aaco_sched_cpu_seconds_total", "node-b", "1002"): 5.0}
        text_a = _wait_for(ports["node-a"], a, deadline)
        text_b = _wait_for(ports["node-b"], b, deadline)
        text_agg = _wait_for(ports["aggregate"], a | b, deadline)
    finally:
        for p in procs.values():
            p.terminate()
        outs = {n: p.communicate(timeout=30)[0].decode() for n, p in procs.items()}
    for n, p in procs.items():
        assert p.returncode == 0, (n, outs[n][-2000:])
        assert "Traceback" not in outs[n], (n, outs[n][-2000:])

    for text, own in ((text_a, "node-a"), (text_b, "node-b")):
        hosts = {lab["host"] for _, lab, _ in _samples(text) if "host" in lab}
        assert hosts == {own}, f"{own} exports other hosts' series: {hosts}"
        its = [(lab["host"], lab["pid"], v) for n, lab, v in _samples(text)
               if n == "aaco_iterations_total"]
        assert its == [(own, "1001" if own == "node-a" else "1002",
                        40.0 if own == "node-a" else 60.0)]
        assert _value(text, "hw_gpu_power_watts", host=own) == (
            100.0 if own == "node-a" else 200.0)

    agg = list(_samples(text_agg))
    assert {lab["host"] for _, lab, _ in agg if "host" in lab} == {"node-a", "node-b"}
    agg_its = sorted((lab["host"], lab["pid"], lab["model"], v) for n, lab, v in agg
                     if n == "aaco_iterations_total")
    assert agg_its == [("node-a", "1001", "m", 40.0), ("node-b", "1002", "m", 60.0)]
    assert sum(v for *_, v in agg_its) == 100.0
    cpu = sum(v for n, _, v in agg if n == "aaco_sched_cpu_seconds_total")
    assert cpu == 8.0
    assert sorted((lab["host"], v) for n, lab, v in agg if n == "hw_gpu_power_watts") == [
        ("node-a", 100.0), ("node-b", 200.0)]
    # every data family the aggregator renders carries a host label
    unlabelled = {n for n, lab, _ in agg if n.startswith(("aaco_", "hw_")) and "host" not in lab
                  and not n.startswith(("aaco_exporter_", "aaco_collector_"))}
    assert unlabelled == set()
    assert _value(text_agg, "aaco_exporter_events_dropped_total", reason="bad_payload") == 0.0


@pytest.mark.slow
def test_aggregate_without_reachable_nats_exits_2_with_one_line(
        cli_env: dict[str, str], aaco: str, tmp_path: Path) -> None:
    """`aggregate --nats` on a dead port: exit status 2, the error as the last line
    of stderr (after the bus's per-attempt warnings), no traceback."""
    r = subprocess.run([aaco, "aggregate", "--nats", f"nats://127.0.0.1:{free_port()}",
                        "--metrics-addr", f"127.0.0.1:{free_port()}"],
                       env=cli_env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-1].startswith("aaco-exporter: error: cannot reach NATS")
    assert "Traceback" not in r.stderr


def test_run_without_analytics_creates_no_consumer_and_exports_a_workers_results(
        nats_server: EmbeddedNats) -> None:
    """`run --no-analytics` (DaemonOptions.analytics=False) creates no durable of
    its own; results a standalone worker publishes for its host still reach its
    /metrics (40 iterations), and another host's results do not."""
    from exporter.daemon import DaemonOptions, run_daemon

    url, port = nats_server.url, free_port()
    opts = DaemonOptions(host="node-c", metrics_host="127.0.0.1", metrics_port=port,
                         analytics=False, duration_s=60)

    async def go() -> tuple[list[str], str]:
        ready = asyncio.Event()
        daemon = asyncio.create_task(run_daemon(opts, BusConfig(url=url), ready))
        await asyncio.wait_for(ready.wait(), 30)
        await _publish_as(url, BusConfig(), "node-c", "iteration_span",
                          _iterations(40, 1003), "c:i")
        await _publish_as(url, BusConfig(), "node-d", "iteration_span",
                          _iterations(9, 1004), "d:i")
        bus = await Bus.open(url, BusConfig(), "worker")
        try:
            worker = AnalyticsConsumer(bus, durable="aaco-analytics", window_s=30.0,
                                       checkpoint=False)
            await worker.start()
            await worker.drain()
            names = [i.name for i in await bus.js.consumers_info(bus.cfg.stream)]
        finally:
            await bus.close()
        text = ""
        for _ in range(100):
            text = await asyncio.to_thread(_scrape, port)
            if _value(text, "aaco_iterations_total", host="node-c") is not None:
                break
            await asyncio.sleep(0.1)
        daemon.cancel()
        with pytest.raises(asyncio.CancelledError):
            await daemon
        return names, text

    names, text = asyncio.run(go())
    assert names == ["aaco-analytics"]
    its = [(lab["host"], lab["pid"], v) for n, lab, v in _samples(text)
           if n == "aaco_iterations_total"]
    assert its == [("node-c", "1003", 40.0)]

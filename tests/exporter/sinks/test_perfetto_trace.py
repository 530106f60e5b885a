"""exporter.sinks.perfetto_trace.write_trace, checked by parsing the file with perfetto's protos."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

from exporter.schema import ITERATION_SPAN, KERNEL_SPAN, conform
from exporter.sinks.perfetto_trace import write_trace
from tests.support import load_path as _load

HERE = Path(__file__).parent


data = _load("aaco_sink_testdata", HERE / "testdata" / "sinkdata.py")


@dataclass
class Parsed:
    """Slices rebuilt per track the way trace_processor nests begin/end pairs."""

    tracks: dict[int, object] = field(default_factory=dict)
    slices: list[dict[str, object]] = field(default_factory=list)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=dict)


def parse(path: Path) -> Parsed:
    """Read the file as trace_processor does: one ``Trace`` (the file is a
    concatenation of ``Trace`` messages), interned names resolved in file order
    (an id must be interned before a packet uses it), then events stably
    sorted by timestamp and begin/end paired per track."""
    trace = Trace.FromString(path.read_bytes())
    out = Parsed()
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    ann_names: dict[int, str] = {}
    strings: dict[int, str] = {}
    events: list[tuple[int, int, TrackEvent]] = []
    for i, p in enumerate(trace.packet):
        assert p.trusted_packet_sequence_id == 1
        if p.sequence_flags & TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            names, cats, ann_names, strings = {}, {}, {}, {}
        d = p.interned_data
        names |= {e.iid: e.name for e in d.event_names}
        cats |= {e.iid: e.name for e in d.event_categories}
        ann_names |= {e.iid: e.name for e in d.debug_annotation_names}
        strings |= {e.iid: e.str.decode() for e in d.debug_annotation_string_values}
        if p.HasField("track_descriptor"):
            out.tracks[p.track_descriptor.uuid] = p.track_descriptor
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:  # resolve interned ids now (file order)
            if ev.name_iid:
                ev.name = names[ev.name_iid]
            ev.categories.extend(cats[c] for c in ev.category_iids)
            for a in ev.debug_annotations:
                if a.name_iid:
                    a.name = ann_names[a.name_iid]
                if a.HasField("string_value_iid"):
                    a.string_value = strings[a.string_value_iid]
        events.append((p.timestamp, i, ev))
    stacks: dict[int, list[dict[str, object]]] = {}
    for ts, _, ev in sorted(events, key=lambda e: (e[0], e[1])):
        st = stacks.setdefault(ev.track_uuid, [])
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            ann = {a.name: a for a in ev.debug_annotations}
            s: dict[str, object] = {
                "track": ev.track_uuid,
                "ts": ts,
                "name": ev.name,
                "cat": ev.categories[0],
                "parent": st[-1] if st else None,
                "flow_out": list(ev.flow_ids),
                "flow_in": list(ev.terminating_flow_ids),
                "corr": ann["correlation_id"].int_value if "correlation_id" in ann else None,
                "ann": ann,
            }
            st.append(s)
            out.slices.append(s)
        elif ev.type == TrackEvent.TYPE_SLICE_END:
            st.pop()["end"] = ts
        elif ev.type == TrackEvent.TYPE_COUNTER:
            out.counters.setdefault(ev.track_uuid, []).append((ts, ev.double_counter_value))
    assert all(not st for st in stacks.values()), "unbalanced begin/end"
    return out


def _sched(pid: int, tid: int, t0: int) -> pa.Table:
    b = conform(
        "sched_sample",
        pa.table(
            {
                "ts_ns": [t0, t0, t0 + 10**8],
                "interval_ns": [10**8] * 3,
                "source": ["proc"] * 3,
                "pid": [pid] * 3,
                "tid": [tid, tid + 1, tid],
                "runq_wait_ns": [25_000_000, 0, 0],
                "run_ns": [75_000_000, 0, 10**8],
                "voluntary_switches": [3, 0, 1],
                "involuntary_switches": [1, 0, 0],
                "comm": ["python3", "ort-pool", "python3"],
            }
        ),
    )
    return pa.Table.from_batches([b])


def test_cpu_trace_slices_nest_kernels_in_iterations_on_thread_track(tmp_path: Path) -> None:
    """magika ORT profile: a slice per kernel and iteration; each kernel nests in its iteration."""
    ks, its = data.magika_tables()
    an = pa.Table.from_batches(
        [
            conform(
                "analytics_result",
                pa.table(
                    {
                        "ts_ns": its["end_ns"],
                        "host": ["h"] * 6,
                        "model": its["model"],
                        "pid": its["pid"],
                        "iterations": [1] * 6,
                        "kernel_count": its["kernel_count"],
                        "sii": [0.1] * 6,
                        "kar": pc.divide(pc.cast(its["duration_ns"], pa.float64()), 1e9),
                        "kernel_spans_total": [96] * 6,
                        "iterations_total": list(range(1, 7)),
                    }
                ),
            )
        ]
    )
    ga = pa.Table.from_batches(
        [
            conform(
                "gauge_sample",
                pa.table(
                    {
                        "ts_ns": its["start_ns"],
                        "metric": ["hw.gpu.power"] * 6,
                        "value": [100.0 + i for i in range(6)],
                        "kind": ["gauge"] * 6,
                        "unit": ["W"] * 6,
                        "source": ["amdsmi"] * 6,
                        "gpu_index": [0] * 6,
                    }
                ),
            )
        ]
    )
    pid, tid = its["pid"][0].as_py(), ks["tid"][0].as_py()
    stats = write_trace(
        tmp_path / "trace.pftrace",
        ks,
        its,
        sched=_sched(pid, tid, its["start_ns"][0].as_py()),
        gauges=ga,
        analytics=an,
    )
    p = parse(stats.path)
    assert (
        len(p.slices) == ks.num_rows + its.num_rows == stats.kernel_slices + stats.iteration_slices
    )
    kernels = [s for s in p.slices if s["cat"] == "kernel"]
    iters = [s for s in p.slices if s["cat"] == "iteration"]
    assert len(kernels) == 576 and len(iters) == 6
    for k in kernels:
        parent = k["parent"]
        assert isinstance(parent, dict) and parent["cat"] == "iteration"
        assert parent["track"] == k["track"]
        assert parent["ts"] <= k["ts"] <= k["end"] <= parent["end"]
    td = p.tracks[kernels[0]["track"]]
    assert td.thread.tid == tid and td.thread.pid == pid
    assert td.thread.thread_name == "python3"  # named from SCHED_SAMPLE.comm
    procs = [t for t in p.tracks.values() if t.HasField("process")]
    assert [t.process.process_name for t in procs] == [f"{data.MAGIKA_MODEL} (pid {pid})"]
    names = {t.name: u for u, t in p.tracks.items() if t.HasField("counter")}
    assert set(names) == {
        "hw.gpu.power gpu0",
        f"aaco.scheduler_interference {data.MAGIKA_MODEL}",
        f"aaco.kernel_amplification {data.MAGIKA_MODEL}",
        "aaco.scheduler_interference.sched",
    }
    assert [v for _, v in p.counters[names["aaco.scheduler_interference.sched"]]] == [0.25, 0.0]
    assert len(p.counters[names["hw.gpu.power gpu0"]]) == 6
    assert stats.counter_tracks == 4 and stats.flows == 0


def test_gpu_trace_has_queue_tracks_and_launch_flows_by_correlation_id(tmp_path: Path) -> None:
    """rocprofv3 kernels go on per-queue tracks; hipLaunchKernel links to the kernel with its
    correlation id (the two doc CSVs are separate runs: the link is by id only)."""
    ks = data.rocprof_kernels()
    api = data.rocprof_hip_api()
    empty = pa.Table.from_batches([conform("iteration_span", ITERATION_SPAN.empty_table())])
    stats = write_trace(tmp_path / "trace.pftrace", ks, empty, hip_api=api)
    p = parse(stats.path)
    assert len(p.slices) == ks.num_rows + api.num_rows
    queues = {u: t for u, t in p.tracks.items() if t.name.startswith("queue ")}
    assert sorted(t.name for t in queues.values()) == ["queue 1", "queue 2", "queue 3", "queue 4"]
    (agent,) = [u for u, t in p.tracks.items() if t.name == "GPU agent 4"]
    assert all(t.parent_uuid == agent for t in queues.values())
    kernels = [s for s in p.slices if s["cat"] == "kernel"]
    assert all(s["track"] in queues for s in kernels)
    per_queue = {t.name: sum(s["track"] == u for s in kernels) for u, t in queues.items()}
    assert per_queue == {"queue 1": 4, "queue 2": 2, "queue 3": 2, "queue 4": 1}
    src = [s for s in p.slices if s["flow_out"]]
    dst = [s for s in p.slices if s["flow_in"]]
    assert stats.flows == 1 and len(src) == len(dst) == 1
    assert src[0]["name"] == "hipLaunchKernel" and src[0]["flow_out"] == dst[0]["flow_in"]
    assert src[0]["corr"] == dst[0]["corr"] == 5
    apis = [s for s in p.slices if s["cat"] == "hip_api"]
    assert {p.tracks[s["track"]].thread.tid for s in apis} == {238}


def test_launch_api_columns_make_synthetic_launch_slices_with_flows(tmp_path: Path) -> None:
    """Without hip_api, launch_api_ns/launch_delay_ns give a 'launch' slice that ends
    launch_delay_ns before its kernel and a flow into that kernel."""
    ks = data.rocprof_kernels()
    n = ks.num_rows
    ks = ks.set_column(ks.schema.get_field_index("pid"), "pid", pa.array([238] * n, pa.int64()))
    ks = ks.set_column(
        ks.schema.get_field_index("launch_api_ns"),
        "launch_api_ns",
        pa.array([5_000] * n, pa.int64()),
    )
    ks = ks.set_column(
        ks.schema.get_field_index("launch_delay_ns"),
        "launch_delay_ns",
        pa.array([2_000] * n, pa.int64()),
    )
    empty = pa.Table.from_batches([conform("iteration_span", ITERATION_SPAN.empty_table())])
    stats = write_trace(tmp_path / "t.pftrace", ks, empty)
    p = parse(stats.path)
    launches = [s for s in p.slices if s["cat"] == "launch"]
    assert len(launches) == n == stats.flows
    by_flow = {s["flow_in"][0]: s for s in p.slices if s["flow_in"]}
    for s in launches:
        k = by_flow[s["flow_out"][0]]
        assert k["corr"] == s["corr"]
        assert k["ts"] - s["end"] == 2_000 and s["end"] - s["ts"] == 5_000


def test_gpu_gauges_get_one_counter_track_per_sensor_and_clock_domain(tmp_path: Path) -> None:
    """Real MI250 rocm-smi rows: four clocks and seven temperatures of one GPU land
    on their own counter tracks (one value each), not interleaved on one track."""
    from collectors.gpu.rocm_smi import parse_rocm_smi
    from collectors.gpu.rows import to_table

    fx = (HERE.parents[2] / "collectors" / "gpu" / "testdata" / "smi" / "wandb"
          / "mi250_rocm_smi_all_rocm6.json")  # real recording, see PROVENANCE.md there
    ga = pa.Table.from_batches([to_table(parse_rocm_smi(fx.read_text()).rows, ts_ns=5,
                                         source="rocm-smi")])  # fmt: skip
    stats = write_trace(tmp_path / "g.pftrace", KERNEL_SPAN.empty_table(),
                        ITERATION_SPAN.empty_table(), gauges=ga)  # fmt: skip
    p = parse(stats.path)
    names = {t.name: u for u, t in p.tracks.items() if t.HasField("counter")}
    clocks = {n for n in names if n.startswith("hw.gpu.clock gpu0 ")}
    temps = {n for n in names if n.startswith("hw.gpu.temperature gpu0 ")}
    assert clocks == {f"hw.gpu.clock gpu0 {c}" for c in ("fclk", "mclk", "sclk", "socclk")}
    assert len(temps) == 7 and "hw.gpu.temperature gpu0 hbm_3" in temps
    assert all(len(p.counters[names[n]]) == 1 for n in clocks | temps)
    assert p.counters[names["hw.gpu.clock gpu0 sclk"]] == [(5, 800e6)]


def _tiled_kernels(copies: int, keep_ids: int) -> pa.Table:
    """The real rocprofv3 rows ``copies`` times, each copy 10 ms later; copy
    ``keep_ids`` keeps the file's correlation ids, the others get new ones."""
    ks = data.rocprof_kernels()
    parts = []
    for i in range(copies):
        t = ks
        for c in ("start_ns", "end_ns"):
            t = t.set_column(t.schema.get_field_index(c), c, pc.add(t[c], 10_000_000 * i))
        if i != keep_ids:
            cid = t.schema.get_field_index("correlation_id")
            t = t.set_column(cid, "correlation_id", pc.add(t["correlation_id"], 1000 * (i + 1)))
        parts.append(t)
    return pa.concat_tables(parts)


def test_gpu_kernels_written_in_chunks_keep_every_slice_and_intern_each_name_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """360 GPU kernels fed as 50-row batches and written 16 rows per chunk: every
    row is one kernel slice with its name, times and ids; each kernel (and HIP
    API function) name is interned once for the whole file; the hipLaunchKernel flow reaches the
    kernel with its correlation id in a late chunk."""
    import exporter.sinks.perfetto_trace as pt

    monkeypatch.setattr(pt, "CHUNK_ROWS", 16)
    ks = _tiled_kernels(40, keep_ids=20)
    empty = pa.Table.from_batches([conform("iteration_span", ITERATION_SPAN.empty_table())])
    stats = write_trace(tmp_path / "t.pftrace", iter(ks.to_batches(max_chunksize=50)), empty,
                        hip_api=data.rocprof_hip_api())
    assert stats.kernel_slices == ks.num_rows == 360
    assert stats.chunks > 360 // 16
    p = parse(stats.path)
    kernels = [s for s in p.slices if s["cat"] == "kernel"]
    got = sorted((s["name"], s["ts"], s["end"], s["corr"],
                  s["ann"]["dispatch_id"].int_value,  # type: ignore[index]
                  s["ann"]["kernel_family"].string_value)  # type: ignore[index]
                 for s in kernels)
    want = sorted(zip(*(ks[c].to_pylist() for c in ("kernel_name", "start_ns", "end_ns",
                                                   "correlation_id", "dispatch_id",
                                                   "kernel_family")), strict=True))
    assert got == want
    interned = [e.name for pk in Trace.FromString(stats.path.read_bytes()).packet
                for e in pk.interned_data.event_names]
    functions = set(data.rocprof_hip_api()["function"].to_pylist())
    assert sorted(interned) == sorted(set(ks["kernel_name"].to_pylist()) | functions)
    (src,) = [s for s in p.slices if s["flow_out"]]
    (dst,) = [s for s in p.slices if s["flow_in"]]
    assert stats.flows == 1 and src["flow_out"] == dst["flow_in"]
    assert src["name"] == "hipLaunchKernel" and dst["corr"] == 5
    assert dst["ts"] in ks["start_ns"].to_pylist()[20 * 9: 21 * 9]  # the copy with the ids


def test_a_failing_write_raises_from_write_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes are written by a writer thread; a write that fails (``/dev/full``:
    ENOSPC) raises ``OSError`` from ``write_trace``, not lost in that thread."""
    import exporter.sinks.perfetto_trace as pt

    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full (Linux)")
    monkeypatch.setattr(pt, "CHUNK_ROWS", 16)
    ks = _tiled_kernels(40, keep_ids=20)
    empty = pa.Table.from_batches([conform("iteration_span", ITERATION_SPAN.empty_table())])
    with pytest.raises(OSError) as e:
        write_trace(Path("/dev/full"), iter(ks.to_batches(max_chunksize=50)), empty)
    assert e.value.errno == 28  # ENOSPC


def test_writes_through_the_writer_thread_keep_their_order_and_its_error_is_raised_by_settle(
) -> None:
    """_Builder hands its bytes to a writer thread: they reach the file in the
    order written, and an error of that thread is raised by ``settle()``."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    import exporter.sinks.perfetto_trace as pt

    class Failing(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b: object) -> int:
            raise OSError(28, "No space left on device")

    out = io.BytesIO()
    with ThreadPoolExecutor(1) as w:
        b = pt._Builder(out, None, w)
        for i in range(50):
            b.raw(bytes([i]) * (i + 1), 1)
        b.settle()
        assert out.getvalue() == b"".join(bytes([i]) * (i + 1) for i in range(50))
        assert (b.packets, b.bytes) == (50, 50 * 51 // 2)
        bad = pt._Builder(Failing(), None, w)
        bad.raw(b"x" * 10, 1)
        with pytest.raises(OSError):
            bad.settle()


@pytest.mark.parametrize("case", ["gpu_hip_api", "gpu_launch_columns", "cpu_iterations"])
def test_the_kernel_columns_alone_give_the_same_trace_bytes(tmp_path: Path, case: str) -> None:
    """write_trace reads only KERNEL_COLUMNS of the kernels (the bundle reads
    no others back from its spool): batches of those columns alone give the
    same file, byte for byte, as the whole KERNEL_SPAN rows (GPU kernels with
    HIP API flows, with synthetic launches, CPU kernels nested in iterations)."""
    from exporter.sinks.perfetto_trace import KERNEL_COLUMNS

    empty = pa.Table.from_batches([conform("iteration_span", ITERATION_SPAN.empty_table())])
    its, api = empty, None
    if case == "cpu_iterations":
        ks, its = data.magika_tables()
    else:
        ks = data.rocprof_kernels()
        if case == "gpu_hip_api":
            api = data.rocprof_hip_api()
        else:
            n = ks.num_rows
            for c, v in (("pid", 238), ("launch_api_ns", 5_000), ("launch_delay_ns", 2_000)):
                ks = ks.set_column(ks.schema.get_field_index(c), c, pa.array([v] * n, pa.int64()))
    assert set(KERNEL_COLUMNS) < set(KERNEL_SPAN.names)
    whole = write_trace(tmp_path / "whole.pftrace", ks, its, hip_api=api)
    part = write_trace(tmp_path / "part.pftrace", iter(ks.select(list(KERNEL_COLUMNS))
                                                       .to_batches()), its, hip_api=api)
    assert whole.kernel_slices == part.kernel_slices == ks.num_rows > 0
    assert part.path.read_bytes() == whole.path.read_bytes()

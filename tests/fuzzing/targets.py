"""Fuzz targets: every parser of external input, its entry point and its contract.

Each :class:`Target` names a parser's public entry point (the one the daemon or CLI
calls), the real recorded files that seed it (``collectors/*/testdata``,
``tests/**/testdata``: copies kept in the repository with their PROVENANCE.md
rows, so a fresh clone fuzzes the same inputs), a
structure-aware mutation (JSON node edits, rocpd SQL edits, bus message re-encodes,
zlib-aware checkpoint edits) and the contract :func:`run_case` checks:

* the parser returns a result, and counts dropped rows/fields by reason token
  (``Rejects`` for rocprof/Kineto, ``ParseResult.drops`` for GPU readers); or
* it raises the documented error type (``ParseError``, ``SchemaError``,
  ``WebConfigError``, ``CheckpointError``), whose ``reason`` (or a short token of
  its message) is the reject reason;
* anything else is a crash: :func:`run_case` lets it propagate.

A bus message that decodes must also be a valid Arrow batch
(``validate(full=True)``) without nulls in non-nullable fields, since consumers
index it without further checks; an accepted checkpoint must load into the engine
and the verdicts (``from_dict``), as the consumer restores it.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import random
import shutil
import sqlite3
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzzing import mutate as M

ROOT = Path(__file__).resolve().parents[2]
ROCPROF_DATA = ROOT / "collectors" / "rocprof" / "testdata"
GPU_DATA = ROOT / "collectors" / "gpu" / "testdata"


@dataclass(frozen=True)
class Seed:
    """A real input file: ``name`` is where the target writes it (or its role)."""

    name: str
    data: bytes


@dataclass
class Outcome:
    """One case's result: ``rejected`` (the whole input refused, ``reason`` set) or
    accepted, with per-row/field ``drops`` by reason (possibly empty)."""

    rejected: bool = False
    reason: str | None = None
    drops: dict[str, int] = field(default_factory=dict)


class InvalidResult(AssertionError):
    """A parser accepted an input but returned something its callers cannot use."""


Runner = Callable[[Seed, bytes, Path], Outcome]


@dataclass
class Target:
    """One parser under fuzz (see the module doc)."""

    name: str
    entry: str  # the function fuzzed, for the README table
    seeds: Callable[[Path], list[Seed]]  # made once per work dir
    run: Runner
    structured: Callable[[Seed, bytes, random.Random], bytes] | None = None
    _seeds: dict[Path, list[Seed]] = field(default_factory=dict)

    def seed_list(self, work: Path) -> list[Seed]:
        """The seeds, made once per work dir (some put files there: certificates)."""
        if work not in self._seeds:
            work.mkdir(parents=True, exist_ok=True)
            self._seeds[work] = self.seeds(work)
        return self._seeds[work]


def build_case(target: Target, work: Path, seed_index: int, structured: list[int],
               plan: M.Plan) -> tuple[Seed, bytes]:
    """The input of one case: seed ``seed_index``, then one structure-aware edit per
    number in ``structured`` (its rng seed), then the byte ops of ``plan``."""
    seeds = target.seed_list(work)
    seed = seeds[seed_index % len(seeds)]
    data = seed.data
    if target.structured is not None:
        for s in structured:
            data = target.structured(seed, data, random.Random(s))
    return seed, M.apply(data, plan)


def random_case(target: Target, work: Path, r: random.Random) -> tuple[Seed, bytes, str]:
    """A random case and its recipe (a string that :func:`case_from_recipe` rebuilds)."""
    seeds = target.seed_list(work)
    idx = r.randrange(len(seeds))
    structured: list[int] = []
    if target.structured is not None and r.random() < 0.6:
        structured = [r.randrange(1 << 32) for _ in range(1 + int(r.expovariate(1.5)))]
    plan = [] if structured and r.random() < 0.5 else M.random_plan(r)
    recipe = json.dumps({"seed": idx, "structured": structured, "plan": plan})
    seed, data = build_case(target, work, idx, structured, plan)
    return seed, data, recipe


def case_from_recipe(target: Target, work: Path, recipe: str) -> tuple[Seed, bytes]:
    d = json.loads(recipe)
    return build_case(target, work, d["seed"], d["structured"],
                      [(op, s) for op, s in d["plan"]])


def run_case(target: Target, seed: Seed, data: bytes, work: Path) -> Outcome:
    """Run ``target`` on ``data``; a crash propagates (see the module doc)."""
    case_dir = work / "case"
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    return target.run(seed, data, case_dir)


# -- rocprof (CSV, JSON, rocpd, v1, compute) and Kineto ------------------------

def _rejects_outcome(rejects: Any, rows: int) -> Outcome:
    counts = dict(rejects.counts)
    whole = {"unknown_format", "missing_column", "bad_json", "io_error"}
    if rows == 0 and counts and set(counts) <= whole:
        return Outcome(rejected=True, reason=sorted(counts)[0], drops=counts)
    return Outcome(drops=counts)


def _load_paths(paths: list[Path]) -> Outcome:
    from collectors.rocprof.rejects import Rejects
    from collectors.rocprof.replay import load_paths

    rejects = Rejects()
    rows = sum(e.batch.num_rows for e in load_paths(paths, rejects, block_size=1 << 12))
    return _rejects_outcome(rejects, rows)


def _dir_runner(base: dict[str, bytes]) -> Runner:
    """Write ``base`` (file name -> bytes) with the seed's file replaced by the case,
    then replay the directory."""

    def run(seed: Seed, data: bytes, case: Path) -> Outcome:
        for name, b in base.items():
            (case / name).write_bytes(b)
        (case / seed.name).write_bytes(data)
        return _load_paths([case])

    return run


def _csv_structured(seed: Seed, data: bytes, r: random.Random) -> bytes:
    """CSV-aware: one cell of a data row gets a value from a pool of hostile values,
    or a generated row (header width, random cells) is inserted."""
    import csv

    text = data.decode("utf-8", "surrogateescape")
    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 2:
        return data
    pool = ["", "-1", "1e309", "NaN", "9" * 30, "Agent X", "abc", "💥", "1.5", "-0",
            str(r.randrange(1 << 64)), "\x00", "0x10", "\u202e"]
    if r.random() < 0.5:
        i = r.randrange(1, len(rows))
        if rows[i]:
            rows[i][r.randrange(len(rows[i]))] = r.choice(pool)
    else:
        width = len(rows[0])
        rows.insert(r.randrange(1, len(rows) + 1),
                    [r.choice([*pool, rows[-1][k] if k < len(rows[-1]) else ""])
                     for k in range(width)])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode("utf-8", "surrogateescape")


def _json_structured(seed: Seed, data: bytes, r: random.Random) -> bytes:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return data
    return M.dumps(M.mutate_json(doc, r), r)


def _rocprofv3_csv_seeds(work: Path) -> list[Seed]:
    api = ROCPROF_DATA / "api"
    return [
        Seed("kernel_trace.csv", (ROCPROF_DATA / "kernel_trace.csv").read_bytes()),
        Seed("kernel_trace.csv", (ROCPROF_DATA / "kernel_trace_2024_schema.csv").read_bytes()),
        Seed("kernel_trace.csv", (ROCPROF_DATA / "kernel_trace_truncated.csv").read_bytes()),
        Seed("hip_runtime_trace.csv", (api / "hip_runtime_trace.csv").read_bytes()),
        Seed("hip_api_trace.csv", (api / "hip_trace.csv").read_bytes()),
        Seed("marker_api_trace.csv", (api / "marker_api_trace.csv").read_bytes()),
        Seed("marker_api_trace.csv",
             (ROCPROF_DATA / "roctx_synthetic" / "marker_api_trace.csv").read_bytes()),
        Seed("memory_copy_trace.csv", (ROCPROF_DATA / "memory_copy_trace.csv").read_bytes()),
        Seed("counter_collection.csv", (ROCPROF_DATA / "counter_collection.csv").read_bytes()),
    ]


ROCPROFV3_CSV = Target(
    "rocprofv3_csv", "collectors.rocprof.replay.load_paths (kernel, HIP API, marker CSVs)",
    _rocprofv3_csv_seeds,
    _dir_runner({"kernel_trace.csv": (ROCPROF_DATA / "kernel_trace.csv").read_bytes(),
                 "hip_runtime_trace.csv":
                     (ROCPROF_DATA / "api" / "hip_runtime_trace.csv").read_bytes(),
                 "marker_api_trace.csv":
                     (ROCPROF_DATA / "roctx_synthetic" / "marker_api_trace.csv").read_bytes()}),
    _csv_structured,
)

ROCPROFV3_JSON = Target(
    "rocprofv3_json", "collectors.rocprof.replay.load_paths (--output-format json)",
    lambda w: [Seed("results.json",
                    (ROCPROF_DATA / "rocprofv3_results_synthetic.json").read_bytes())],
    _dir_runner({}),
    _json_structured,
)


def _head_lines(p: Path, n: int = 60) -> bytes:
    return b"".join(p.read_bytes().splitlines(keepends=True)[:n])


ROCPROF_V1 = Target(
    "rocprof_v1", "collectors.rocprof.replay.load_paths (results.csv, results.stats.csv)",
    lambda w: [Seed("results.csv", _head_lines(ROCPROF_DATA / "finite_difference_results.csv")),
               Seed("results.csv", _head_lines(ROCPROF_DATA / "seismic_stencils_results.csv")),
               Seed("results.stats.csv",
                    (ROCPROF_DATA / "finite_difference_results.stats.csv").read_bytes())],
    _dir_runner({}),
    _csv_structured,
)

ROCPROF_COMPUTE = Target(
    "rocprof_compute", "collectors.rocprof.replay.load_paths (timestamps.csv)",
    lambda w: [Seed("timestamps.csv", (ROCPROF_DATA / d / "timestamps.csv").read_bytes())
               for d in ("rocprof_compute_MI200", "rocprof_compute_MI300X_A1")],
    _dir_runner({}),
    _csv_structured,
)


def _rocpd_seeds(work: Path) -> list[Seed]:
    from tests.collectors.rocprof.rocpd_synthetic import build_synthetic_rocpd

    p = build_synthetic_rocpd(work / "seed_synthetic.db", markers=ROCPROF_DATA
                              / "roctx_synthetic" / "marker_api_trace.csv")
    return [Seed("results.db", p.read_bytes())]


_SQL_VALUES: tuple[object, ...] = (None, -1, 0, 2**63 - 1, -(2**63), 1e308, float("nan"),
                                   "abc", "", "💥", b"\x00\xff", 3.5)


def _rocpd_structured(seed: Seed, data: bytes, r: random.Random) -> bytes:
    """SQL-level edit of a rocpd database: one table's cell set to a hostile value
    (NULL, text in an integer column, huge, NaN, a blob), rows deleted or duplicated,
    a view dropped, or the schema version changed."""
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(data)
        tables = [t for (t,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'rocpd%'")]
        if not tables:
            return data
        op = r.randrange(6)
        t = r.choice(tables)
        cols = [c[1] for c in con.execute(f'PRAGMA table_info("{t}")')]
        if op <= 2 and cols:
            c = r.choice(cols)
            con.execute(f'UPDATE "{t}" SET "{c}" = ? WHERE rowid IN '
                        f'(SELECT rowid FROM "{t}" ORDER BY random() LIMIT ?)',
                        (r.choice(_SQL_VALUES), r.choice((1, 1, 3, 1000))))
        elif op == 3:
            con.execute(f'DELETE FROM "{t}" WHERE rowid IN '
                        f'(SELECT rowid FROM "{t}" LIMIT ?)', (r.choice((1, 5, 1000)),))
        elif op == 4:
            views = [v for (v,) in con.execute("SELECT name FROM sqlite_master "
                                               "WHERE type='view'")]
            if r.random() < 0.5 and views:
                con.execute(f'DROP VIEW "{r.choice(views)}"')
            else:
                con.execute("UPDATE rocpd_metadata SET value = ? WHERE tag = 'schema_version'",
                            (r.choice(("2", "4", "3.0", "", None, 3)),))
        else:
            with contextlib.suppress(sqlite3.IntegrityError):
                con.execute(f'INSERT INTO "{t}" SELECT * FROM "{t}" LIMIT 3')
        con.commit()
        return bytes(con.serialize())
    except sqlite3.Error:
        return data
    finally:
        con.close()


ROCPD = Target(
    "rocpd", "collectors.rocprof.replay.load_paths (rocpd SQLite .db)",
    _rocpd_seeds, _dir_runner({}), _rocpd_structured,
)


def _kineto_seeds(work: Path) -> list[Seed]:
    doc = gzip.decompress(
        (ROCPROF_DATA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz").read_bytes())
    return [Seed("trace.json", doc), Seed("trace.json.gz", doc)]


def _kineto_run(seed: Seed, data: bytes, case: Path) -> Outcome:
    from collectors.kineto.follow import TraceDirFollower
    from collectors.rocprof.rejects import Rejects

    p = case / seed.name
    p.write_bytes(gzip.compress(data, 1) if seed.name.endswith(".gz") else data)
    rejects = Rejects()
    f = TraceDirFollower(case, rejects, settle_s=0.0, log=lambda s: None)
    st = p.stat()
    emits = f._parse(p, (st.st_size, st.st_mtime_ns))
    return _rejects_outcome(rejects, sum(e.batch.num_rows for e in emits))


KINETO = Target(
    "kineto", "collectors.kineto.follow.TraceDirFollower._parse (load_json + kineto_emits)",
    _kineto_seeds, _kineto_run, _json_structured,
)


# -- GPU readers ---------------------------------------------------------------

def _gpu_outcome(res: Any) -> Outcome:
    """Drops of a GPU ``ParseResult``, after building its Arrow batch as the
    collector does (so values and attributes must fit GAUGE_SAMPLE)."""
    from collectors.gpu.rows import to_table

    to_table(res.rows, ts_ns=1, source="fuzz")
    return Outcome(drops=dict(res.drops))


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _rocm_smi_seeds(work: Path) -> list[Seed]:
    files = sorted((GPU_DATA / "smi").rglob("*.json")) + sorted(GPU_DATA.glob("rocm_smi_*.json"))
    return [Seed(f.name, f.read_bytes()) for f in files if "amd_smi" not in f.name]


def _rocm_smi_run(seed: Seed, data: bytes, case: Path) -> Outcome:
    from collectors.gpu import rows as R
    from collectors.gpu.rocm_smi import parse_rocm_smi

    try:
        return _gpu_outcome(parse_rocm_smi(_text(data), where=seed.name))
    except R.ParseError as e:
        return Outcome(rejected=True, reason=e.reason)


ROCM_SMI = Target("rocm_smi", "collectors.gpu.rocm_smi.parse_rocm_smi",
                  _rocm_smi_seeds, _rocm_smi_run, _json_structured)


def _amd_smi_seeds(work: Path) -> list[Seed]:
    return [Seed("static", (GPU_DATA / "smi" / "amd_smi" / "mi210_amd_smi_static.json")
                 .read_bytes()),
            Seed("metric", (GPU_DATA / "amd_smi_metric_gpu_data_synthetic.json").read_bytes()),
            Seed("metric", (GPU_DATA / "amd_smi_metric_list_synthetic.txt").read_bytes())]


def _amd_smi_run(seed: Seed, data: bytes, case: Path) -> Outcome:
    from collectors.gpu import rows as R
    from collectors.gpu.amd_smi import parse_metric, parse_static

    try:
        if seed.name == "static":
            devices, res = parse_static(_text(data))
            res.extend(parse_metric(_text(data), devices))
        else:
            res = parse_metric(_text(data))
        return _gpu_outcome(res)
    except R.ParseError as e:
        return Outcome(rejected=True, reason=e.reason)


def _amd_smi_structured(seed: Seed, data: bytes, r: random.Random) -> bytes:
    text = data.decode("utf-8", "surrogateescape")
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=0)
    banner, body = text[:start], text[start:]
    out = _json_structured(seed, body.encode("utf-8", "surrogateescape"), r)
    return banner.encode("utf-8", "surrogateescape") + out


AMD_SMI = Target("amd_smi", "collectors.gpu.amd_smi.parse_static / parse_metric",
                 _amd_smi_seeds, _amd_smi_run, _amd_smi_structured)

SYSFS_TREE = GPU_DATA / "sysfs_synthetic"


def _sysfs_seeds(work: Path) -> list[Seed]:
    return [Seed(str(f.relative_to(SYSFS_TREE)), f.read_bytes())
            for f in sorted(SYSFS_TREE.rglob("*")) if f.is_file()]


def _sysfs_run(seed: Seed, data: bytes, case: Path) -> Outcome:
    from collectors.gpu.sysfs import read_sysfs

    root = case.parent / "sys"  # one copy of the tree per work dir; the case's file
    if not root.exists():  # is put in and the recorded one put back afterwards
        shutil.copytree(SYSFS_TREE, root)
    target = root / seed.name
    try:
        target.write_bytes(data)
        return _gpu_outcome(read_sysfs(root))
    finally:
        target.write_bytes(seed.data)


SYSFS = Target("sysfs", "collectors.gpu.sysfs.read_sysfs", _sysfs_seeds, _sysfs_run, None)


# -- bus messages ---------------------------------------------------------------

def _bus_seeds(work: Path) -> list[Seed]:
    """Real messages: kernel and iteration spans replayed from the recorded
    rocprofv3 CSVs and Kineto trace, gauge rows from a recorded rocm-smi JSON,
    generate calls recorded from the romanizer's generate loop, some signals'
    empty batches."""
    from collectors.gpu.rocm_smi import parse_rocm_smi
    from collectors.gpu.rows import to_table
    from collectors.rocprof.replay import load_paths
    from exporter import schema

    batches: list[tuple[str, Any]] = []
    for e in load_paths([ROCPROF_DATA / "kernel_trace.csv",
                         ROCPROF_DATA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]):
        batches.append((e.signal, e.batch.slice(0, 20)))
    smi = (GPU_DATA / "smi" / "wandb" / "mi250_rocm_smi_all_rocm6.json").read_text()
    batches.append(("gauge_sample", to_table(parse_rocm_smi(smi).rows, ts_ns=1, source="rocm-smi")))
    batches.extend((s, schema.empty_batch(s)) for s in ("graph_info", "sched_sample",
                                                       "bottleneck", "process_info"))
    from exporter.instrument.llm import load as load_spans
    from exporter.instrument.publisher import generate_batch

    spans = load_spans([str(ROOT / "tests" / "exporter" / "testdata"
                            / "romanizer_generate_spans.jsonl")])
    batches.append(("generate_span", generate_batch(spans)))
    seeds = []
    for sig, b in batches:
        msg = schema.encode(sig, b, host="node-1", msg_id="m1")
        seeds.append(Seed(sig, json.dumps(msg.headers).encode() + b"\n" + msg.payload))
    return seeds


def _bus_structured(seed: Seed, data: bytes, r: random.Random) -> bytes:
    """Header edits (missing, unknown signal, bad version) or a re-encoded payload:
    nulls in a non-nullable column, a column cast to another type, two batches, no
    compression, another signal's schema."""
    import pyarrow as pa

    from exporter import schema

    head, _, payload = data.partition(b"\n")
    try:
        headers = json.loads(head)
    except ValueError:
        headers = {}
    if not isinstance(headers, dict):
        headers = {}
    op = r.randrange(6)
    if op == 0:
        k = r.choice(list(headers) or ["Aaco-Schema"])
        if r.random() < 0.5:
            headers.pop(k, None)
        else:
            headers[k] = r.choice(("", "2", "x", "kernel_span", "otlp.traces", "\uff11", "-0"))
        return json.dumps(headers).encode() + b"\n" + payload
    try:
        with pa.ipc.open_stream(payload) as rd:
            batch = rd.read_all().combine_chunks().to_batches()
            batch = batch[0] if batch else schema.empty_batch(seed.name)
    except (pa.ArrowInvalid, OSError):
        return data
    cols = list(batch.columns)
    i = r.randrange(len(cols))
    if op == 1 and batch.num_rows:
        cols[i] = pa.nulls(batch.num_rows, cols[i].type)
        batch = pa.RecordBatch.from_arrays(cols, schema=batch.schema)
    elif op == 2:
        f = batch.schema.field(i)
        new_t = r.choice((pa.string(), pa.int32(), pa.float64(), pa.large_string()))
        try:
            cols[i] = cols[i].cast(new_t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            cols[i] = pa.nulls(batch.num_rows, new_t)
        batch = pa.RecordBatch.from_arrays(
            cols, schema=batch.schema.set(i, pa.field(f.name, new_t, f.nullable)))
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression=None if op == 3 else "lz4")
    with pa.ipc.new_stream(sink, batch.schema, options=opts) as w:
        w.write_batch(batch)
        if op == 4:
            w.write_batch(batch)
    if op == 5:
        headers["Aaco-Schema"] = r.choice(list(schema.SCHEMAS))
    return json.dumps(headers).encode() + b"\n" + sink.getvalue().to_pybytes()


def _bus_run(seed: Seed, data: bytes, case: Path) -> Outcome:
    import pyarrow as pa

    from exporter import schema

    head, _, payload = data.partition(b"\n")
    try:
        raw = json.loads(head)
    except (ValueError, RecursionError):
        raw = None
    headers = ({str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else None)
    try:
        sig, _, _, batch = schema.decode(payload, headers)
    except schema.SchemaError as e:
        return Outcome(rejected=True, reason=e.reason)
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as e:
        raise InvalidResult(f"decode returned an invalid batch: {e}") from e
    for f in schema.SCHEMAS[sig]:
        if not f.nullable and batch.column(f.name).null_count:
            raise InvalidResult(f"decode returned nulls in non-nullable {f.name!r}")
    return Outcome()


BUS = Target("bus", "exporter.schema.decode (Arrow IPC payload + headers)",
             _bus_seeds, _bus_run, _bus_structured)


# -- web config ------------------------------------------------------------------

_BCRYPT = "$2b$04$" + "C" * 53


def _webconfig_seeds(work: Path) -> list[Seed]:
    from tests.support import make_pki

    pki = work / "pki"
    if not (pki / "server.crt").exists():
        pki.mkdir(parents=True, exist_ok=True)
        make_pki(pki)
    texts = [
        f"basic_auth_users:\n  prometheus: {_BCRYPT}\n",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        "  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n"
        "  min_version: TLS12\n  max_version: TLS13\n",
        "http_server_config:\n  http2: true\n  headers:\n"
        "    Strict-Transport-Security: max-age=31536000\n"
        f"basic_auth_users:\n  alice: {_BCRYPT}\n  bob: {_BCRYPT}\n",
    ]
    return [Seed("web.yml", t.encode()) for t in texts]


def _webconfig_run(seed: Seed, data: bytes, case: Path) -> Outcome:
    from exporter.webconfig import WebConfigError, load_web_config

    pki = case.parent / "pki"
    for f in ("server.crt", "server.key", "ca.crt"):
        (case / f).symlink_to(pki / f)
    p = case / "web.yml"
    p.write_bytes(data)
    try:
        load_web_config(p)
    except WebConfigError as e:
        return Outcome(rejected=True, reason=_field_reason(e.field, str(e)))
    return Outcome()


def _field_reason(field_: str, msg: str) -> str:
    """A bounded token: the file-level problem, or the top-level key at fault."""
    if not field_:
        for token, reason in (("invalid YAML", "invalid_yaml"), ("not UTF-8", "not_utf8")):
            if token in msg:
                return reason
        return "unreadable"
    top = field_.split(".")[0]
    known = {"tls_server_config", "http_server_config", "basic_auth_users", "(top level)"}
    return top if top in known else "unknown_key"


def _yaml_structured(seed: Seed, data: bytes, r: random.Random) -> bytes:
    import yaml

    try:
        doc = yaml.safe_load(data)
    except (yaml.YAMLError, RecursionError, ValueError):
        return data
    if not isinstance(doc, dict | list):
        return data
    mutated = M.mutate_json(json.loads(json.dumps(doc, default=str)), r)
    return yaml.safe_dump(mutated, allow_unicode=True).encode("utf-8", "surrogatepass")


WEBCONFIG = Target("webconfig", "exporter.webconfig.load_web_config",
                   _webconfig_seeds, _webconfig_run, _yaml_structured)


# -- checkpoints -------------------------------------------------------------------

def _checkpoint_seeds(work: Path) -> list[Seed]:
    """Checkpoints of an engine fed with the recorded rocprofv3 kernels and Kineto
    steps, and of drift monitors fed with a series (EWMA, CUSUM, Page-Hinkley, ADWIN)."""
    from collectors.rocprof.replay import load_paths
    from stream_analytics import checkpoint
    from stream_analytics.drift import DriftMonitor
    from stream_analytics.engine import Analytics
    from stream_analytics.verdicts import OnlineVerdicts

    eng = Analytics(window_s=None)
    for e in load_paths([ROCPROF_DATA / "kernel_trace.csv",
                         ROCPROF_DATA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]):
        eng.ingest(e.signal, "node-1", e.batch)
    eng.settle()
    ov = OnlineVerdicts()
    ov.drift = DriftMonitor()
    rng = random.Random(9)
    for i in range(120):
        ov.drift.update("latency", "resnet", rng.gauss(10.0 + (i > 80), 1.0), ts_ns=i, host="h")
    states = [
        {"engine": eng.to_dict(), "last_seq": 7, "processed": [5, 6, 7], "generation": 3,
         "drops": {"bad_values": 1}, "verdicts": ov.to_dict()},
        {"engine": Analytics().to_dict(), "last_seq": 0, "processed": [], "generation": 0,
         "drops": {}, "verdicts": OnlineVerdicts().to_dict()},
    ]
    return [Seed("checkpoint", checkpoint.encode(s)) for s in states]


def _checkpoint_structured(seed: Seed, data: bytes, r: random.Random) -> bytes:
    """Inflate, edit the JSON (a node, or bytes), deflate: reaches the schema checks."""
    try:
        body = zlib.decompress(data)
    except zlib.error:
        return data
    edit = r.random() < 0.75
    body = _json_structured(seed, body, r) if edit else M.apply(body, M.random_plan(r))
    return zlib.compress(body)


def _checkpoint_run(seed: Seed, data: bytes, case: Path) -> Outcome:
    from stream_analytics import checkpoint

    try:
        checkpoint.restore(data)
    except checkpoint.CheckpointError as e:
        return Outcome(rejected=True, reason=_checkpoint_reason(str(e)))
    return Outcome()


def _checkpoint_reason(msg: str) -> str:
    for token, reason in (("refused by its loader", "loader"),
                          ("not zlib", "not_zlib"), ("truncated", "truncated"),
                          ("not JSON", "not_json"), ("foreign", "foreign_format"),
                          ("version", "bad_version"), ("empty", "empty")):
        if token in msg:
            return reason
    return "schema"


CHECKPOINT = Target("checkpoint", "stream_analytics.checkpoint.restore (decode + from_dict)",
                    _checkpoint_seeds, _checkpoint_run, _checkpoint_structured)


TARGETS: dict[str, Target] = {t.name: t for t in (
    ROCPROFV3_CSV, ROCPROFV3_JSON, ROCPD, ROCPROF_V1, ROCPROF_COMPUTE, KINETO,
    ROCM_SMI, AMD_SMI, SYSFS, BUS, WEBCONFIG, CHECKPOINT)}
"""Every fuzz target by name."""

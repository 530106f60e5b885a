"""Security of the bus and the exposition against a real nats-server.

* NATS authorization (user/password, token) and TLS (server-auth and mutual)
  with :func:`exporter.bus.connect` / :meth:`exporter.bus.Bus.open`.
* Hostile host names, model names and 100 KB kernel names published on the
  real bus cannot add subject tokens, raw kernel names or broken lines to
  the Prometheus exposition (checked with ``promtool check metrics``).

Certificates are generated at test time with the ``openssl`` CLI.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.rocprof.families import FAMILIES, classify
from exporter import schema
from exporter.bus import Bus, BusConfig, BusError, connect
from exporter.natsserver import EmbeddedNats
from exporter.sinks.prometheus import PromState
from stream_analytics.engine import Analytics
from tests.support import make_pki

FAST_FAIL = {"connect_attempts": 2, "connect_timeout_s": 0.5}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    return make_pki(tmp_path_factory.mktemp("pki"))


def _iters(n: int = 1) -> pa.Table:
    return pa.table({"start_ns": [0] * n, "end_ns": [1] * n, "duration_ns": [1] * n,
                     "source": ["ort"] * n, "model": ["m"] * n, "pid": [1] * n,
                     "iteration": list(range(n)), "kernel_count": [0] * n})


async def _publish_and_count(url: str, cfg: BusConfig) -> int:
    """Bus.open (creates the stream), publish one message, return the stream's count."""
    bus = await Bus.open(url, cfg, "host-a")
    try:
        await bus.publish_table("iteration_span", _iters(2), "sec:0")
        info = await bus.js.stream_info(cfg.stream)
        return int(info.state.messages)
    finally:
        await bus.close()


# -- NATS authorization ---------------------------------------------------------


def test_nats_user_password_required_and_accepted(tmp_path: Path) -> None:
    """authorization {user, password}: the right pair publishes; none or a wrong one -> BusError."""
    conf = "authorization { user: aaco, password: s3cret }"
    with EmbeddedNats(tmp_path / "nats", extra_config=conf) as srv:
        assert asyncio.run(_publish_and_count(
            srv.url, BusConfig(user="aaco", password="s3cret"))) == 1
        for bad in (BusConfig(**FAST_FAIL),  # type: ignore[arg-type]
                    BusConfig(user="aaco", password="wrong", **FAST_FAIL)):  # type: ignore[arg-type]
            with pytest.raises(BusError, match=f"cannot reach NATS at {srv.url} after 2"):
                asyncio.run(connect(srv.url, bad))


def test_nats_token_required_and_accepted(tmp_path: Path) -> None:
    """authorization {token}: the token publishes; no token or a wrong one -> BusError."""
    conf = 'authorization { token: "t0k3n-aaco-123" }'
    with EmbeddedNats(tmp_path / "nats", extra_config=conf) as srv:
        assert asyncio.run(_publish_and_count(srv.url, BusConfig(token="t0k3n-aaco-123"))) == 1
        for bad in (BusConfig(**FAST_FAIL),  # type: ignore[arg-type]
                    BusConfig(token="guess", **FAST_FAIL)):  # type: ignore[arg-type]
            with pytest.raises(BusError):
                asyncio.run(connect(srv.url, bad))


# -- NATS TLS -------------------------------------------------------------------


def _tls_conf(pki: dict[str, Path], verify: bool = False) -> str:
    extra = f', ca_file: "{pki["ca.crt"]}", verify: true' if verify else ""
    return (f'tls {{ cert_file: "{pki["server.crt"]}", key_file: "{pki["server.key"]}"'
            f"{extra} }}")


def test_nats_tls_with_the_ca_connects_and_without_it_fails(
        tmp_path: Path, pki: dict[str, Path]) -> None:
    """A TLS-only nats-server: BusConfig(tls_ca=CA) publishes over tls://; no CA -> BusError."""
    with EmbeddedNats(tmp_path / "nats", extra_config=_tls_conf(pki)) as srv:
        url = srv.url.replace("nats://", "tls://")
        assert asyncio.run(_publish_and_count(url, BusConfig(tls_ca=str(pki["ca.crt"])))) == 1
        with pytest.raises(BusError, match=f"cannot reach NATS at {url}"):
            asyncio.run(connect(url, BusConfig(**FAST_FAIL)))  # type: ignore[arg-type]
        with pytest.raises(BusError):  # plain client against a TLS-required server
            asyncio.run(connect(srv.url, BusConfig(**FAST_FAIL)))  # type: ignore[arg-type]


def test_nats_mutual_tls_needs_the_client_cert(tmp_path: Path, pki: dict[str, Path]) -> None:
    """tls {verify: true}: tls_ca + tls_cert/tls_key publishes; the CA alone is refused."""
    with EmbeddedNats(tmp_path / "nats", extra_config=_tls_conf(pki, verify=True)) as srv:
        url = srv.url.replace("nats://", "tls://")
        ok = BusConfig(tls_ca=str(pki["ca.crt"]), tls_cert=str(pki["client.crt"]),
                       tls_key=str(pki["client.key"]))
        assert asyncio.run(_publish_and_count(url, ok)) == 1
        with pytest.raises(BusError):
            asyncio.run(connect(url, BusConfig(tls_ca=str(pki["ca.crt"]),
                                               **FAST_FAIL)))  # type: ignore[arg-type]


# -- hostile names --------------------------------------------------------------

HOSTILE_HOSTS = ["evil.host.*>", 'a"b\nc', "a\\b\\nc} # HELP x y\n# EOF", "", "h" * 300]
MARK = "EVILKERNEL"
JUNK = (f'{MARK}"}}\n{{le="+Inf"}} 1e308\n# TYPE x counter\r\n\\{{}}\0 gemm ' * 2000)[:100_000]
HOSTILE_MODEL = 'm"o\\del\n{x="1"} 2'


def _hostile_tables(n: int) -> dict[str, pa.Table]:
    """One table per signal whose strings are all attacker-controlled."""
    names = [JUNK[i:] + str(i) for i in range(n)]  # distinct 100 KB kernel names
    kname = pa.array(names)
    return {
        "graph_info": pa.table({"model": [HOSTILE_MODEL], "node_count": [n],
                                "total_nodes": [n], "edge_count": [0],
                                "op_types": [[JUNK[:1000]]], "op_counts": [[n]], "pid": [7]}),
        "kernel_span": pa.table({
            "start_ns": [i * 10 for i in range(n)], "end_ns": [i * 10 + 5 for i in range(n)],
            "duration_ns": [5] * n, "source": ['rocprof"\n'] * n, "model": [HOSTILE_MODEL] * n,
            "pid": [7] * n, "iteration": [0] * n, "kernel_name": kname,
            "kernel_family": classify(kname), "node_name": [JUNK[:5000]] * n}),
        "iteration_span": pa.table({
            "start_ns": [0], "end_ns": [n * 10], "duration_ns": [n * 10], "source": ["ort"],
            "model": [HOSTILE_MODEL], "pid": [7], "iteration": [0], "kernel_count": [n]}),
        "gauge_sample": pa.table({
            "ts_ns": [1], "metric": ["hw.gpu.power"], "value": [1.5], "kind": ["gauge"],
            "unit": ["W"], "source": ["sysfs"], "gpu_index": [0], "gpu_uuid": ['u"\n{}'],
            "attributes": pa.array([[("hw.gpu.model", 'M"I\n300X{}'), ('we"ird key{', "v")]],
                                   pa.map_(pa.string(), pa.string()))}),
        "sched_sample": pa.table({
            "ts_ns": [1], "interval_ns": [1_000_000], "source": ["proc"], "pid": [7],
            "tid": [7], "comm": [JUNK[:200]], "runq_wait_ns": [10], "run_ns": [100],
            "voluntary_switches": [1], "involuntary_switches": [2],
            "runq_hist_log2_ns": [[0, 1, 2]], "top_preemptors": [[JUNK[:300]]]}),
    }


async def _through_the_bus(url: str) -> tuple[list[str], PromState, list[str]]:
    """Publish hostile data per host, run analytics on what arrives, feed PromState."""
    nc = await connect(url, BusConfig())
    sub = await nc.subscribe(f"{schema.SUBJECT_PREFIX}.>")
    subjects: list[str] = []
    state = PromState()
    eng = Analytics(window_s=None)
    try:
        sent = 0
        for i, host in enumerate(HOSTILE_HOSTS):
            bus = Bus(nc, BusConfig(), host)
            if i == 0:
                await bus.ensure_stream()
            for sig, table in _hostile_tables(3).items():
                sent += await bus.publish_table(sig, table, f"hostile-{i}-{sig}")
        for _ in range(sent):
            msg = await sub.next_msg(timeout=10)
            subjects.append(msg.subject)
            sig, _, host, batch = schema.decode(msg.data, msg.headers)
            eng.ingest(sig, host, batch)
            state.ingest(sig, host, batch)
        results = eng.results(now_ns=10**12)
        assert results.num_rows == len(HOSTILE_HOSTS)
        await Bus(nc, BusConfig(), "analytics").publish_table("analytics_result", results, "r")
        msg = await sub.next_msg(timeout=10)
        subjects.append(msg.subject)
        sig, _, host, batch = schema.decode(msg.data, msg.headers)
        state.ingest(sig, host, batch)
        # A publisher may forge Aaco-Host; the sink must still render it safely.
        for raw_host in HOSTILE_HOSTS:
            gauges = schema.conform("gauge_sample", _hostile_tables(1)["gauge_sample"])
            state.ingest("gauge_sample", raw_host, gauges)
    finally:
        await nc.close()
    return subjects, state, [r["host"] for r in results.to_pylist()]


@pytest.mark.apt
def test_hostile_names_cannot_break_subjects_labels_or_exposition(tmp_path: Path) -> None:
    """Hostile hosts/models/100 KB kernel names: 4-token subjects, valid promtool output.

    Also: no raw kernel name (nor any 200-byte piece of it) is exported, the
    ``family`` label stays within FAMILIES, and escaped label values parse
    back to exactly the hostile strings (escaping, not truncation).
    """
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(promtool).exists():
        pytest.skip("promtool not installed")
    with EmbeddedNats(tmp_path / "nats") as srv:
        subjects, state, result_hosts = asyncio.run(_through_the_bus(srv.url))

    token = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
    assert len(subjects) == len(HOSTILE_HOSTS) * 5 + 1
    for subj in subjects:
        parts = subj.split(".")
        assert len(parts) == 4 and parts[:2] == ["aaco", "v1"], subj
        assert parts[2] in schema.SCHEMAS and token.match(parts[3]), subj
    assert {s.split(".")[3] for s in subjects} >= {
        "evil_host___", "a_b_c", "unknown", "h" * 64}
    assert sorted(result_hosts) == sorted(schema.sanitize_token(h) for h in HOSTILE_HOSTS)

    reg = CollectorRegistry()
    reg.register(state)
    text = generate_latest(reg)
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                         timeout=60, check=False)
    assert (out.returncode, out.stdout + out.stderr) == (0, b"")

    decoded = text.decode()
    families = {m.name: m for m in text_string_to_metric_families(decoded)}
    # comm is a process name, not a kernel name: a label bounded at the kernel's
    # 15 characters (TASK_COMM_LEN - 1) that round-trips through escaping
    comms = {s.labels["comm"] for f in families.values() for s in f.samples if "comm" in s.labels}
    assert comms == {JUNK[:15]}
    for comm in comms:
        decoded = decoded.replace(comm.replace("\\", "\\\\").replace('"', '\\"')
                                  .replace("\n", "\\n"), "")
    assert MARK not in decoded and JUNK[:200] not in decoded
    assert len(text) < 200_000, "100 KB names must not reach the exposition"
    fam_labels = {s.labels["family"] for s in families["aaco_kernel_spans"].samples}
    assert fam_labels and fam_labels <= set(FAMILIES)
    models = {s.labels["model"] for s in families["aaco_iterations"].samples}
    assert models == {HOSTILE_MODEL}
    power_hosts = {s.labels["host"] for s in families["hw_gpu_power_watts"].samples}
    assert set(HOSTILE_HOSTS) <= power_hosts  # forged raw hosts round-trip exactly
    attrs = {s.labels["hw_gpu_model"] for s in families["hw_gpu_power_watts"].samples}
    assert attrs == {'M"I\n300X{}'}

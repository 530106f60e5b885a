"""The ``aaco-exporter`` command line.

Exit status: 0 on success, 1 for a regression verdict (``diff``), 2 for bad
input (a missing or non-ONNX model, inputs that cannot be generated, an
unreachable ``--nats`` URL, a feature whose extra is not installed:
:class:`~exporter.extras.MissingExtra`). Errors are one clear line on stderr,
never a traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from exporter.bundle_dir import BundleWriteError
from exporter.busconfig import BusConfig, BusError
from exporter.extras import MissingExtra
from exporter.natsserver import NatsServerError
from exporter.phases import Phases

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Event-streaming observability exporter for AI inference.")

NatsOpt = Annotated[str | None, typer.Option("--nats", help="NATS URL, or a cluster's URLs "
                                             "comma-separated; default: start an embedded "
                                             "nats-server with JetStream")]
ReplicasOpt = Annotated[int | None, typer.Option(
    "--stream-replicas", min=1, max=5,
    help="JetStream replicas of the AACO stream, the analytics KV bucket and durable "
         "consumers (3 on a 3-node cluster); default: 1 for a new stream, an existing "
         "stream keeps its count")]


OutboxOpt = Annotated[int, typer.Option(
    "--outbox-max-bytes", min=0,
    help="bytes of messages held (memory, then a disk spool) while the bus is down; past "
         "it they are dropped and counted by reason")]
DupWindowOpt = Annotated[float, typer.Option(
    "--nats-duplicate-window", min=0.1,
    help="seconds JetStream deduplicates a re-published message id (stream setting)")]
OUTBOX_MAX_BYTES = BusConfig.outbox_max_bytes
DUPLICATE_WINDOW_S = BusConfig.duplicate_window_s


def _session_bus(nats: str | None, outbox_max_bytes: int, dup_window: float,
                 replicas: int | None = None) -> BusConfig:
    return BusConfig(url=nats, outbox_max_bytes=outbox_max_bytes,
                     duplicate_window_s=dup_window, stream_replicas=replicas)


def _finish(derived: dict[str, object], session: Path, timings: str | None = None) -> None:
    """Print the phase timings (stderr, unless None), the summary and the
    session; exit 2 when the result is partial."""
    from exporter.capture import format_summary

    if timings is not None:
        typer.echo(timings, err=True)
    typer.echo(format_summary(derived))
    short = derived.get("shortfall")
    if short:
        typer.echo(f"aaco-exporter: error: incomplete session: {short}", err=True)
    typer.echo(str(session))
    if short:
        raise typer.Exit(2)


_SKIP_TEARDOWN = {"on": False, "main": False}
"""``on``: set by a bulk command (:func:`_skip_teardown`), read by
:func:`main`; ``main``: set by :func:`main`, read by :func:`_skip_teardown`
(the console script's process is the command's)."""


def _skip_teardown() -> None:
    """Let :func:`main` end this process without the interpreter's teardown
    once the command has returned or exited (its output written, its
    embedded nats-server stopped): a bulk command (``replay``) leaves
    hundreds of MB of arrays and every imported module (pyarrow, numpy,
    nats, protobuf, pydantic) behind, and freeing them one by one, with the
    collector's passes over all objects at finalization, took 0.15-0.25 s
    of one core after a 2M-row replay (``perf``; about 5% of its wall time).
    The ``atexit`` handlers still run and stdout/stderr are flushed first;
    the exit status is the command's. Only the console-script entry point
    (:func:`main`) acts on it: in-process callers (``typer.testing``, the
    test suite) are unaffected.

    Under :func:`main` it also turns Python's cyclic garbage collector off
    for the rest of the process (``gc.disable``): a replay makes almost no
    cyclic garbage (a 2M-row run collected 1,256 objects in 157 passes, which
    cost about 0.1 s of CPU, mostly on the event loop's thread: 1.76 ->
    1.685 s, ``benchmarks/README.md``), and the process ends with the
    command."""
    _SKIP_TEARDOWN["on"] = True
    if _SKIP_TEARDOWN["main"]:
        import gc

        gc.disable()


def _exit_now(code: object) -> None:
    """``SystemExit(code)``'s status, after the ``atexit`` handlers and a
    flush of stdout/stderr, via ``os._exit`` (no teardown). A non-integer
    code is printed to stderr and exits 1, as the interpreter does."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed: nothing more to write
                stream.flush()
        os._exit(code or 0)


def _fail(msg: str) -> None:
    typer.echo(f"aaco-exporter: error: {msg}", err=True)
    raise typer.Exit(2)


def _load_config_file(ctx: typer.Context, _param: object, value: Path | None) -> Path | None:
    """``--config`` callback (eager): check the file and make its ``[run]``
    keys the command's defaults (click ``default_map``: flag > env > file)."""
    if value is None:
        return None
    from exporter.config import ConfigError, load_config

    try:
        cfg = load_config(value)
        # keys are the long flags with underscores (--metrics-addr -> metrics_addr)
        by_key = {o[2:].replace("-", "_"): p for p in ctx.command.params if p.name
                  for o in p.opts if o.startswith("--") and o != "--config"}
        run: dict[str, object] = {}
        for key, v in cfg.run.items():
            p = by_key.get(key)
            if p is None or p.name is None:
                known = ", ".join(sorted(by_key))
                raise ConfigError(f"{value}:run.{key}: unknown key; known: {known}")
            try:
                p.process_value(ctx, v)
            except typer.BadParameter as e:
                raise ConfigError(f"{value}:run.{key}: {e.message}") from None
            run[p.name] = v
    except ConfigError as e:
        _fail(str(e))
        raise AssertionError from None  # _fail raises
    ctx.default_map = {**(ctx.default_map or {}), **run}
    ctx.meta["aaco_config"] = cfg
    return value


ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", is_eager=True, callback=_load_config_file,
    help="TOML config file: [run] flags by name, [collectors.NAME] plugin options, [otlp] "
         "(precedence flag > environment > file > default); see docs/configuration.md")]


def _explicit(ctx: typer.Context) -> set[str]:
    """Parameters set by a flag, the environment or the config file (not defaults)."""
    out = set()
    for p in ctx.command.params:
        src = ctx.get_parameter_source(p.name) if p.name else None
        if p.name and src is not None and src.name != "DEFAULT":
            out.add(p.name)
    return out


def _providers(text: str | None) -> list[str] | None:
    """``--providers A,B`` as a list (``None`` when not given)."""
    if not text:
        return None
    out = [p.strip() for p in text.split(",") if p.strip()]
    if not out:
        _fail(f"--providers {text!r} names no provider")
    return out


def _kv(items: list[str], what: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for it in items:
        name, sep, val = it.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name] = float(val)
        except ValueError:
            _fail(f"{what} {it!r} is not NAME=NUMBER")
    return out


def _bus_cfg(nats: str | None, creds: str | None, user: str | None, password: str | None,
             token: str | None, tls_ca: str | None) -> BusConfig:
    return BusConfig(url=nats, creds_file=creds, user=user, password=password, token=token,
                     tls_ca=tls_ca)


def _replicas(nats: str | None, n: int | None) -> int | None:
    """``--stream-replicas``, refused above 1 for the embedded (single) server."""
    if n is not None and n > 1 and not nats:
        _fail(f"--stream-replicas {n} needs --nats with a JetStream cluster of at least {n} "
              "servers; the embedded nats-server is a single node")
    return n


def _lab_cpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    from exporter.labmode import parse_cpus

    try:
        cpus = parse_cpus(text)
    except ValueError as e:
        _fail(f"--lab-cpus: {e}")
        raise AssertionError from None  # _fail raises
    allowed = os.sched_getaffinity(0)
    if not set(cpus) <= allowed:
        _fail(f"--lab-cpus {text}: CPUs {sorted(set(cpus) - allowed)} are not available "
              f"(this process may use {sorted(allowed)})")
    return cpus


@app.command()
def capture(
    command: Annotated[list[str] | None, typer.Argument(
        help="-- COMMAND ARGS: profile a workload (under rocprofv3 when on PATH)")] = None,
    model: Annotated[str | None, typer.Option(help="ONNX model path or alias (magika)")] = None,
    iterations: Annotated[int, typer.Option(min=1)] = 200,
    warmup: Annotated[int, typer.Option(min=0)] = 5,
    out: Annotated[Path, typer.Option(help="parent directory of session bundles")] = Path(
        "sessions"),
    model_name: Annotated[str | None, typer.Option()] = None,
    dim: Annotated[list[str], typer.Option(help="symbolic dim NAME=VALUE")] = [],  # noqa: B006
    fill: Annotated[list[str], typer.Option(help="constant input NAME=VALUE")] = [],  # noqa: B006
    nats: NatsOpt = None,
    stream_replicas: ReplicasOpt = None,
    quiet: Annotated[bool, typer.Option(
        help="no progress bar and no timings on stderr (for scripts)")] = False,
    rocprofv3: Annotated[str, typer.Option(help="rocprofv3 executable")] = "rocprofv3",
    providers: Annotated[str | None, typer.Option(
        help="ONNX Runtime execution providers in order, comma-separated (e.g. "
             "MIGraphXExecutionProvider,CPUExecutionProvider); default: the best available")
    ] = None,
    outbox_max_bytes: OutboxOpt = OUTBOX_MAX_BYTES,
    nats_duplicate_window: DupWindowOpt = DUPLICATE_WINDOW_S,
    calibration: Annotated[Path | None, typer.Option(
        "--calibration", help="calibration.json for HEU (default: as `calibrate`)")] = None,
    lab: Annotated[bool, typer.Option(
        "--lab", help="laboratory mode: dedicated cpuset cgroup, pinned threads, CPU governor "
                      "recorded, GPU clocks locked and restored (docs/lab-mode.md)")] = False,
    lab_cpus: Annotated[str | None, typer.Option(
        "--lab-cpus", help="CPUs for --lab, e.g. 2-7 (default: all but the lowest)")] = None,
    pmc: Annotated[list[str], typer.Option(
        "--pmc", help="with -- CMD: a hardware counter for rocprofv3 --pmc (repeat the flag); "
                      "the bundle gets roofline.json (docs/calibration.md)")] = [],  # noqa: B006
) -> None:
    """Bounded lab capture; prints the session directory as the last line.

    Either ``--model M`` (run an ONNX model under ONNX Runtime's profiler) or
    ``-- COMMAND ARGS`` (run a workload, under rocprofv3 when it is on PATH).
    Exit status 2, after writing the bundle, when it is incomplete: fewer (or
    more) iterations or kernel spans recorded than run, or messages the bus
    outbox had to drop.
    """
    if bool(model) == bool(command):
        _fail("give either --model or -- COMMAND ARGS")
    if pmc and not command:
        _fail("--pmc needs -- COMMAND ARGS (counters are collected by rocprofv3)")
    if (lab or lab_cpus) and command:
        _fail("--lab applies to --model captures (the model runs in the lab cpuset)")
    import asyncio

    bus_cfg = _session_bus(nats, outbox_max_bytes, nats_duplicate_window)
    bus_cfg.stream_replicas = _replicas(nats, stream_replicas)
    if command:
        from exporter.capture_cmd import capture_command

        phases = Phases()
        try:
            session, derived, rc = asyncio.run(
                capture_command(command, out, bus_cfg, rocprofv3=rocprofv3, pmc=pmc,
                                phases=phases, progress=not quiet))
        except (FileNotFoundError, PermissionError, BusError, NatsServerError,
                BundleWriteError, MissingExtra) as e:
            _fail(str(e))
            return
        if rc != 0:
            typer.echo(f"aaco-exporter: warning: {command[0]} exited with status {rc}", err=True)
        _finish(derived, session, None if quiet else phases.summary())
        return
    assert model is not None
    from collectors.ort import InputError, ModelError
    from exporter.capture import CaptureOptions
    from exporter.capture import capture as run_capture

    opts = CaptureOptions(model=model, iterations=iterations, warmup=warmup, out=out,
                          model_name=model_name, dims={k: int(v) for k, v in
                                                       _kv(dim, "--dim").items()},
                          fill=_kv(fill, "--fill"), progress=not quiet, argv=sys.argv,
                          providers=_providers(providers), calibration=calibration,
                          lab=lab, lab_cpus=_lab_cpus(lab_cpus))
    try:
        session, derived = asyncio.run(run_capture(opts, bus_cfg))
    except (ModelError, InputError, BusError, NatsServerError, BundleWriteError,
            MissingExtra) as e:
        _fail(str(e))
        return
    _finish(derived, session, None if quiet else opts.phases.summary())


@app.command()
def run(
    ctx: typer.Context,
    config: ConfigOpt = None,
    model: Annotated[str | None, typer.Option(help="ONNX model to run and profile")] = None,
    model_name: Annotated[str | None, typer.Option()] = None,
    providers: Annotated[str | None, typer.Option(
        help="with --model: ONNX Runtime execution providers in order, comma-separated")] = None,
    nats: NatsOpt = None,
    stream_replicas: ReplicasOpt = None,
    metrics_addr: Annotated[str, typer.Option(help="HOST:PORT for /metrics")] = "0.0.0.0:9464",
    pid: Annotated[list[int], typer.Option(help="also watch this process")] = [],  # noqa: B006
    collector: Annotated[list[str], typer.Option(help="extra collector plugin")] = [],  # noqa: B006
    rocprof_dir: Annotated[str | None, typer.Option(help="follow a rocprofv3 output dir")] = None,
    kineto_dir: Annotated[str | None, typer.Option(
        help="follow a Kineto (PyTorch profiler) trace dir, e.g. VLLM_TORCH_PROFILER_DIR")] = None,
    window: Annotated[float, typer.Option(help="analytics window, seconds")] = 30.0,
    flush_interval: Annotated[float, typer.Option(
        min=0.1, max=8.0, help="seconds between analytics result flushes (spans: 50 ms "
                               "after the stream goes quiet): longer costs less CPU, "
                               "metrics move less often")] = 1.0,
    checkpoint_interval: Annotated[float, typer.Option(
        min=0.0, max=300.0, help="seconds between analytics checkpoints (KV) and the input "
                                 "acks after them; 0: at every flush. Longer costs less CPU; "
                                 "a crash replays up to this much input")] = 30.0,
    publish_interval: Annotated[float, typer.Option(
        min=0.0, max=60.0, help="seconds between publishes of background samples (GPU "
                                "gauges, scheduler samples), each still sampled at its "
                                "collector's interval; the first at once. 0: after every "
                                "collect. Spans and snapshots are never held")] = 5.0,
    duration: Annotated[float | None, typer.Option(help="stop after N seconds")] = None,
    state_dir: Annotated[str | None, typer.Option(
        help="embedded NATS state dir; also the outbox spool (STATE_DIR/outbox)")] = None,
    outbox_max_bytes: OutboxOpt = OUTBOX_MAX_BYTES,
    nats_duplicate_window: DupWindowOpt = DUPLICATE_WINDOW_S,
    nats_creds: Annotated[str | None, typer.Option(help="NATS .creds file")] = None,
    nats_user: Annotated[str | None, typer.Option()] = None,
    nats_password: Annotated[str | None, typer.Option(envvar="AACO_NATS_PASSWORD")] = None,
    nats_token: Annotated[str | None, typer.Option(envvar="AACO_NATS_TOKEN")] = None,
    nats_tls_ca: Annotated[str | None, typer.Option()] = None,
    nats_tls_cert: Annotated[str | None, typer.Option(help="client cert for mTLS")] = None,
    nats_tls_key: Annotated[str | None, typer.Option()] = None,
    web_config_file: Annotated[str | None, typer.Option(
        help="TLS / basic auth for /metrics (Prometheus exporter-toolkit format)")] = None,
    otlp_endpoint: Annotated[str | None, typer.Option(
        help="export spans+metrics via OTLP (else OTEL_EXPORTER_OTLP_ENDPOINT)")] = None,
    otlp_protocol: Annotated[str | None, typer.Option(
        help="grpc or http/protobuf (else OTEL_EXPORTER_OTLP_PROTOCOL; default grpc)")] = None,
    otlp_header: Annotated[list[str], typer.Option(
        help="KEY=VALUE header (else OTEL_EXPORTER_OTLP_HEADERS)")] = [],  # noqa: B006
    otlp_insecure: Annotated[bool | None, typer.Option(
        "--otlp-insecure/--otlp-secure",
        help="no TLS to the OTLP endpoint (else OTEL_EXPORTER_OTLP_INSECURE)")] = None,
    otlp_ca: Annotated[str | None, typer.Option(
        help="CA file for OTLP TLS (else OTEL_EXPORTER_OTLP_CERTIFICATE)")] = None,
    otlp_compression: Annotated[str | None, typer.Option(
        help="gzip or none (else OTEL_EXPORTER_OTLP_COMPRESSION; default none)")] = None,
    otlp_bus: Annotated[bool, typer.Option(help="publish OTLP protobuf on aaco.v1.otlp.*")] = False,
    watch: Annotated[str | None, typer.Option(
        help="auto: discover inference processes (GPU device fds, ORT/HIP/torch libraries); "
             "none: only --pid/--watch-comm/--watch-cgroup. Default: auto, or none with "
             "--model")] = None,
    watch_comm: Annotated[str | None, typer.Option(
        help="also watch processes whose comm matches this regex")] = None,
    watch_cgroup: Annotated[str | None, typer.Option(
        help="also watch the processes of this cgroup v2 directory and below")] = None,
    max_watched: Annotated[int, typer.Option(
        min=1, help="most processes watched; the rest are counted as dropped")] = 64,
    watch_interval: Annotated[float, typer.Option(
        min=0.1, help="seconds between discovery rescans")] = 5.0,
    attach: Annotated[list[int], typer.Option(
        help="sample this GPU process with rocprofv3 --attach windows (repeatable)")
    ] = [],  # noqa: B006
    attach_every: Annotated[float, typer.Option(
        min=0.1, help="seconds between attach windows of a process")] = 60.0,
    attach_window: Annotated[float, typer.Option(
        min=0.05, help="length of one attach window, seconds")] = 2.0,
    attach_discovered: Annotated[bool, typer.Option(
        help="also sample every process discovery watches")] = False,
    rocprofv3: Annotated[str, typer.Option(help="rocprofv3 executable (--attach)")] = "rocprofv3",
    nats_listen: Annotated[str, typer.Option(
        help="HOST:PORT of the embedded nats-server (no --nats); instrumented processes "
             "publish here (AACO_NATS_URL)")] = "127.0.0.1:4222",
    log_level: Annotated[str, typer.Option()] = "INFO",
    host_name: Annotated[str | None, typer.Option("--host", help=(
        "this node's host name on the bus (default: the hostname); the daemon "
        "reads and exports only this host's subjects"))] = None,
    with_analytics: Annotated[bool, typer.Option("--analytics/--no-analytics", help=(
        "run this host's analytics consumer; --no-analytics when a standalone "
        "`analytics` worker serves the host"))] = True,
) -> None:
    """The always-on daemon: collectors -> NATS -> analytics -> /metrics.

    Without --model it observes the inference processes already running on
    the node (workload discovery); --model runs the exporter's own copy of a
    model as a lab load generator.
    """
    import asyncio

    from collectors.ort import InputError, ModelError
    from exporter.daemon import DaemonOptions, run_daemon
    from exporter.webconfig import WebConfigError

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    host, _, port = metrics_addr.rpartition(":")
    if not port.isdigit():
        _fail(f"--metrics-addr {metrics_addr!r} is not HOST:PORT")
    nl_host, _, nl_port = nats_listen.rpartition(":")
    if not nl_port.isdigit():
        _fail(f"--nats-listen {nats_listen!r} is not HOST:PORT")
    if watch not in (None, "auto", "none"):
        _fail(f"--watch {watch!r}: expected auto or none")
    if watch_comm:
        import re

        try:
            re.compile(watch_comm)
        except re.error as e:
            _fail(f"--watch-comm {watch_comm!r} is not a regular expression: {e}")
    opts = DaemonOptions(model=model, model_name=model_name, metrics_host=host or "0.0.0.0",
                         metrics_port=int(port), pids=list(pid), collectors=list(collector),
                         window_s=window, duration_s=duration, state_dir=state_dir,
                         rocprof_dir=rocprof_dir, kineto_dir=kineto_dir, watch=watch,
                         watch_comm=watch_comm, watch_cgroup=watch_cgroup,
                         max_watched=max_watched, watch_interval_s=watch_interval,
                         nats_listen=(nl_host or "127.0.0.1", int(nl_port)),
                         explicit=_explicit(ctx), attach_pids=list(attach),
                         attach_every_s=attach_every, attach_window_s=attach_window,
                         attach_discovered=attach_discovered, rocprofv3=rocprofv3)
    fc = ctx.meta.get("aaco_config")
    if fc is not None:
        opts.collector_options = dict(fc.collectors)
    if providers and not model:
        _fail("--providers applies to --model (the lab load generator); an observed server "
              "chooses its own providers")
    if providers:
        opts.collector_options["ort"] = {**opts.collector_options.get("ort", {}),
                                         "providers": _providers(providers)}
    cfg = _bus_cfg(nats, nats_creds, nats_user, nats_password, nats_token, nats_tls_ca)
    cfg.tls_cert, cfg.tls_key = nats_tls_cert, nats_tls_key
    cfg.stream_replicas = _replicas(nats, stream_replicas)
    cfg.outbox_max_bytes, cfg.duplicate_window_s = outbox_max_bytes, nats_duplicate_window
    opts.web_config, opts.otlp_bus = web_config_file, otlp_bus
    opts.analytics = with_analytics
    opts.flush_interval_s = flush_interval
    opts.checkpoint_interval_s = checkpoint_interval
    opts.publish_interval_s = publish_interval
    if with_analytics:
        from stream_analytics.consumer import redelivery_horizon_s

        horizon = redelivery_horizon_s(checkpoint_interval, flush_interval)
        if horizon > nats_duplicate_window:
            _fail(f"--checkpoint-interval {checkpoint_interval:g} with --flush-interval "
                  f"{flush_interval:g} needs a duplicate window of at least {horizon:g} s "
                  f"(--nats-duplicate-window is {nats_duplicate_window:g}): results "
                  "re-published after a crash would be stored twice")
    if host_name is not None:
        if not host_name.strip():
            _fail("--host must not be empty")
        opts.host = host_name
    file_otlp: dict[str, object] = dict(fc.otlp) if fc is not None else {}
    flags: dict[str, object] = {}
    for key, param, v in (("endpoint", "otlp_endpoint", otlp_endpoint),
                          ("protocol", "otlp_protocol", otlp_protocol),
                          ("insecure", "otlp_insecure", otlp_insecure),
                          ("ca_file", "otlp_ca", otlp_ca),
                          ("compression", "otlp_compression", otlp_compression)):
        if v is not None:  # a [run] otlp_* key of the file ranks below the environment
            src = ctx.get_parameter_source(param)
            from_file = src is not None and src.name == "DEFAULT_MAP"
            (file_otlp if from_file else flags)[key] = v
    if otlp_header:
        headers = {}
        for h in otlp_header:
            k, sep, v = h.partition("=")
            if not sep:
                _fail(f"--otlp-header {h!r} is not KEY=VALUE")
            headers[k] = v
        flags["headers"] = headers
    try:  # flags > OTEL_* environment > defaults; OTLP on when an endpoint is known
        from exporter.sinks.otel_env import build_otlp_config

        opts.otlp = build_otlp_config(flags, os.environ, file_otlp)
    except (ValueError, MissingExtra) as e:
        _fail(str(e))
    try:
        asyncio.run(run_daemon(opts, cfg))
    except (ModelError, InputError, BusError, NatsServerError, WebConfigError, OSError,
            MissingExtra) as e:
        _fail(str(e))


@app.command()
def replay(
    paths: Annotated[list[Path], typer.Argument(help="rocprof output files or directories")],
    out: Annotated[Path, typer.Option(help="parent directory of session bundles")] = Path(
        "sessions"),
    nats: NatsOpt = None,
    stream_replicas: ReplicasOpt = None,
    outbox_max_bytes: OutboxOpt = OUTBOX_MAX_BYTES,
    nats_duplicate_window: DupWindowOpt = DUPLICATE_WINDOW_S,
    quiet: Annotated[bool, typer.Option(
        help="no progress bar and no timings on stderr (for scripts)")] = False,
) -> None:
    """Push recorded rocprof/Kineto outputs through the bus and analytics.

    Shows a progress bar on stderr (when it is a terminal) and prints the
    seconds per phase (parse, bus, analytics, bundle, trace) to stderr at the
    end, unless ``--quiet``. Exit status 2, after writing the bundle, when the
    bus outbox dropped messages."""
    from exporter.blas_threads import import_numpy
    from exporter.malloc_tuning import tune_for_batch

    tune_for_batch()  # a bulk job: fewer page faults for a little more RSS
    import_numpy()  # without OpenBLAS's 0.1 s spin beside the parser
    from exporter.replay import start_parsing

    _skip_teardown()  # and no interpreter teardown once it has ended
    try:  # the parser starts first: it runs while the rest is imported and the bus opens
        parsing = start_parsing(paths)
    except FileNotFoundError as e:
        _fail(str(e))
        return
    import asyncio

    from collectors.rocprof.formats import UnknownFormat
    from exporter.replay import NothingToReplay
    from exporter.replay import replay as run_replay

    try:
        session, derived, rejects, phases = asyncio.run(run_replay(
            paths, out, _session_bus(nats, outbox_max_bytes, nats_duplicate_window,
                                     _replicas(nats, stream_replicas)), progress=not quiet,
            parsing=parsing))
    except (FileNotFoundError, UnknownFormat, NothingToReplay, BusError, NatsServerError,
            BundleWriteError, MissingExtra) as e:
        _fail(str(e))
        return
    typer.echo(f"rejected rows: {rejects.summary()}", err=True)
    _finish(derived, session, None if quiet else phases.summary())


BaselineDirOpt = Annotated[Path | None, typer.Option(
    "--baseline-dir", envvar="AACO_BASELINE_DIR",
    help="where named baselines are stored; default "
         "$XDG_DATA_HOME/aaco-exporter/baselines (~/.local/share/aaco-exporter/baselines)")]


@app.command()
def diff(
    baseline: Annotated[str, typer.Option(
        help="baseline: a name saved with `baseline save`, or a session bundle directory")],
    session_arg: Annotated[Path | None, typer.Argument(
        metavar="[SESSION]", help="session bundle to judge (or --session)")] = None,
    session: Annotated[Path | None, typer.Option(help="session bundle to judge")] = None,
    threshold: Annotated[str, typer.Option(help="latency regression threshold")] = "5%",
    baseline_dir: BaselineDirOpt = None,
) -> None:
    """Compare two bundles; exit status 1 on a regression (for CI gates)."""
    from exporter.diff import main_diff

    target = session or session_arg
    if target is None or (session and session_arg and session != session_arg):
        _fail("diff: give the session bundle once, as SESSION or --session")
        return
    try:
        rc = main_diff(baseline, target, threshold, baseline_dir)
    except MissingExtra as e:
        _fail(str(e))
        return
    raise typer.Exit(rc)


@app.command()
def calibrate(
    calibration: Annotated[Path | None, typer.Option(
        "--calibration", help="calibration file; default $AACO_CALIBRATION, else "
                              "~/.cache/aaco-exporter/calibration.json")] = None,
    refresh: Annotated[bool, typer.Option(help="remeasure even when a calibration exists")
                       ] = False,
    gemm_n: Annotated[int, typer.Option(min=64, help="GEMM matrix size n")] = 2048,
    reps: Annotated[int, typer.Option(min=1, help="repetitions per figure")] = 5,
    stream_mib: Annotated[int | None, typer.Option(
        min=1, help="STREAM array size in MiB (default 4x last-level cache, >= 64)")] = None,
) -> None:
    """Measure this host's peak FLOP/s (GEMM) and memory bandwidth (STREAM copy,
    triad) and store calibration.json; reused when present (docs/calibration.md)."""
    from exporter.calibrate import CalibrateOptions, default_path, format_summary
    from exporter.calibrate import calibrate as run_calibrate

    path = calibration or default_path()
    opts = CalibrateOptions(gemm_n=gemm_n, gemm_reps=reps, stream_reps=reps,
                            stream_bytes=None if stream_mib is None else stream_mib << 20)
    try:
        data, how = run_calibrate(path, refresh, opts,
                                  progress=lambda m: typer.echo(f"measuring {m}", err=True))
    except OSError as e:
        _fail(f"{path}: cannot write calibration: {e.strerror or e}")
        return
    typer.echo(format_summary(data))
    typer.echo(f"calibration {how}: {path}")


@app.command()
def analytics(
    nats: Annotated[str, typer.Option("--nats", help="NATS URL of the shared bus (a "
                                      "cluster's URLs comma-separated)")],
    stream_replicas: ReplicasOpt = None,
    durable: Annotated[str, typer.Option(help="durable consumer name")] = "aaco-analytics",
    window: Annotated[float, typer.Option(help="analytics window, seconds")] = 30.0,
    batch: Annotated[int, typer.Option(min=1, help="messages per fetch")] = 512,
    exit_when_idle: Annotated[bool, typer.Option(help="stop once nothing is pending")] = False,
    partitions: Annotated[int, typer.Option(min=1, help="stream partitions by host")] = 1,
    flush_interval: Annotated[float, typer.Option(
        min=0.0, help="seconds between result/checkpoint/ack flushes")] = 1.0,
    checkpoint_interval: Annotated[float, typer.Option(
        min=0.0, max=300.0, help="seconds between checkpoints (and the input acks after "
                                 "them); 0: at every flush")] = 0.0,
    instance: Annotated[str, typer.Option(help="K/M: this worker's share of the hosts")] = "0/1",
) -> None:
    """A standalone analytics worker: JetStream in, analytics results out.

    Several workers share the hosts with ``--instance K/M`` on a stream created
    with ``--partitions N`` (N >= M); each worker uses the durable ``NAME-K``.
    """
    k, _, m = instance.partition("/")
    if not (k.isdigit() and m.isdigit() and int(k) < int(m)):
        _fail(f"--instance {instance!r} is not K/M with K < M")
    import asyncio

    from exporter.bus import Bus
    from stream_analytics.consumer import AnalyticsConsumer, redelivery_horizon_s

    horizon = redelivery_horizon_s(checkpoint_interval, flush_interval)
    if horizon > DUPLICATE_WINDOW_S:
        _fail(f"--checkpoint-interval {checkpoint_interval:g} with --flush-interval "
              f"{flush_interval:g} needs a duplicate window of at least {horizon:g} s (the "
              f"stream's is {DUPLICATE_WINDOW_S:g}): results re-published after a crash would "
              "be stored twice")

    async def main_() -> None:
        import signal
        import socket

        bus = await Bus.open(nats, BusConfig(url=nats, partitions=partitions,
                                             stream_replicas=stream_replicas),
                             socket.gethostname())
        name = durable if m == "1" else f"{durable}-{k}"
        consumer = AnalyticsConsumer(bus, durable=name, window_s=window, batch=batch,
                                     instance=int(k), instances=int(m),
                                     flush_interval_s=flush_interval, sched_keys=True,
                                     checkpoint_interval_s=checkpoint_interval)
        await consumer.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(s, stop.set)
        try:
            if exit_when_idle:
                await consumer.drain()
            else:
                await consumer.run(stop)
        finally:
            await bus.close()

    try:
        asyncio.run(main_())
    except BusError as e:
        _fail(str(e))


@app.command()
def aggregate(
    nats: Annotated[str, typer.Option("--nats", help="NATS URL of the shared bus (a "
                                      "cluster's URLs comma-separated)")],
    metrics_addr: Annotated[str, typer.Option(help="HOST:PORT for /metrics")] = "0.0.0.0:9464",
    web_config_file: Annotated[str | None, typer.Option(
        help="TLS / basic auth for /metrics (Prometheus exporter-toolkit format)")] = None,
    duration: Annotated[float | None, typer.Option(help="stop after N seconds")] = None,
    nats_creds: Annotated[str | None, typer.Option(help="NATS .creds file")] = None,
    nats_user: Annotated[str | None, typer.Option()] = None,
    nats_password: Annotated[str | None, typer.Option(envvar="AACO_NATS_PASSWORD")] = None,
    nats_token: Annotated[str | None, typer.Option(envvar="AACO_NATS_TOKEN")] = None,
    nats_tls_ca: Annotated[str | None, typer.Option()] = None,
    log_level: Annotated[str, typer.Option()] = "INFO",
) -> None:
    """Fleet /metrics: every host's results from the shared bus, host-labelled.

    Runs no collectors and no analytics; scrape it instead of the node
    daemons for fleet-wide sums.
    """
    import asyncio

    from exporter.aggregate import AggregateOptions, run_aggregate
    from exporter.webconfig import WebConfigError

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    host, _, port = metrics_addr.rpartition(":")
    if not port.isdigit():
        _fail(f"--metrics-addr {metrics_addr!r} is not HOST:PORT")
    opts = AggregateOptions(metrics_host=host or "0.0.0.0", metrics_port=int(port),
                            web_config=web_config_file, duration_s=duration)
    cfg = _bus_cfg(nats, nats_creds, nats_user, nats_password, nats_token, nats_tls_ca)
    try:
        asyncio.run(run_aggregate(opts, cfg))
    except (BusError, WebConfigError, OSError, ValueError) as e:
        _fail(str(e))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def instrument(
    command: Annotated[list[str] | None, typer.Argument(
        help="the program and its arguments, after --", show_default=False)] = None,
) -> None:
    """Run a Python program with ONNX Runtime instrumented (no code change).

    aaco-exporter instrument -- python server.py ARGS

    Every InferenceSession.run / run_with_iobinding call becomes an
    iteration_span on the bus (one graph_info per model); the exit status is
    the program's. Environment: AACO_NATS_URL (bus, default
    nats://127.0.0.1:4222, where `aaco-exporter run` listens), AACO_HOST
    (host name on the bus), AACO_MODEL_NAME (model name instead of the file
    stem), AACO_INSTRUMENT_QUEUE (queued calls before dropping, default
    65536). With the bus down the program runs at full speed; drops are
    counted by reason. See docs/instrument.md.
    """
    from exporter.instrument.launch import LaunchError, exec_instrumented

    try:
        exec_instrumented(command or [])
    except LaunchError as e:
        _fail(str(e))


@app.command()
def report(session: Annotated[Path, typer.Argument(help="session bundle")]) -> None:
    """Write SESSION/report/report.html with plots (needs the 'report' extra)."""
    from exporter.report import main_report

    raise typer.Exit(main_report(session))


baseline_app = typer.Typer(help="Named baselines for `diff --baseline NAME`.",
                           no_args_is_help=True)
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("save")
def baseline_save(
    name: Annotated[str, typer.Argument(help="baseline name (A-Z a-z 0-9 . _ -)")],
    session: Annotated[Path, typer.Argument(help="session bundle to keep")],
    force: Annotated[bool, typer.Option("--force", help="replace a baseline of that name")]
    = False,
    baseline_dir: BaselineDirOpt = None,
) -> None:
    """Copy a session bundle into the baseline store under NAME; prints its path."""
    from exporter.baselines import BaselineError, save, store_dir

    try:
        b = save(name, session, store_dir(baseline_dir), force=force)
    except (BaselineError, BundleWriteError, OSError) as e:
        _fail(str(e))
        return
    typer.echo(str(b.root))


@baseline_app.command("list")
def baseline_list(baseline_dir: BaselineDirOpt = None) -> None:
    """One line per saved baseline: name, session id, kind, saved at, source."""
    from exporter.baselines import list_all, store_dir

    for b in list_all(store_dir(baseline_dir)):
        m = b.meta
        typer.echo(f"{b.name}\t{m.get('session_id')}\t{m.get('kind')}\t{m.get('saved_at')}"
                   f"\t{m.get('source')}")


@baseline_app.command("show")
def baseline_show(name: Annotated[str, typer.Argument(help="baseline name")],
                  baseline_dir: BaselineDirOpt = None) -> None:
    """Print a baseline's baseline.json (with its stored bundle path)."""
    import json

    from exporter.baselines import BaselineError, load, store_dir

    try:
        b = load(name, store_dir(baseline_dir))
    except BaselineError as e:
        _fail(str(e))
        return
    typer.echo(json.dumps({**b.meta, "bundle": str(b.bundle)}, indent=2))


config_app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")
SECRET_KEYS = ("nats_password", "nats_token")


@config_app.command("show")
def config_show(config: Annotated[Path | None, typer.Option(
        "--config", help="TOML config file, as given to run")] = None) -> None:
    """Print the effective `run` configuration as TOML: defaults, then the
    file, then the environment (secrets masked)."""
    from exporter.config import ConfigError, load_config, to_toml
    from exporter.sinks.otel_env import otlp_env

    cmd = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    try:
        fc = load_config(config) if config is not None else None
        env_otlp = otlp_env(os.environ)
    except (ConfigError, ValueError) as e:
        _fail(str(e))
        return
    run: dict[str, object] = {}
    for p in cmd.params:
        longs = [o for o in p.opts if o.startswith("--") and o != "--config"]
        if not longs or p.name is None:
            continue
        key = longs[0][2:].replace("-", "_")
        value = p.default if not callable(p.default) else None
        if fc is not None and key in fc.run:
            value = fc.run[key]
        envvar = p.envvar if isinstance(p.envvar, str) else None
        if envvar and os.environ.get(envvar):
            value = os.environ[envvar]
        if p.name in SECRET_KEYS and value:
            value = "***"
        run[key] = list(value) if isinstance(value, tuple) else value
    otlp = {**(fc.otlp if fc else {}), **env_otlp.generic}
    if "headers" in otlp:
        otlp["headers"] = {k: "***" for k in otlp["headers"]}  # header values are credentials
    typer.echo(to_toml({"run": run, "collectors": dict(fc.collectors) if fc else {},
                        "otlp": otlp}))


def main() -> None:
    """Console-script entry point. A command that called
    :func:`_skip_teardown` ends the process with its exit status and
    without the interpreter's teardown (:func:`_exit_now`)."""
    _SKIP_TEARDOWN["on"] = False  # a command of this process sets it
    _SKIP_TEARDOWN["main"] = True
    try:
        app()
    except SystemExit as e:
        if _SKIP_TEARDOWN["on"]:
            _exit_now(e.code)
        raise


if __name__ == "__main__":
    main()

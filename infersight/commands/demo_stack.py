"""The demo's moving parts besides the embedded store: HTTP faces of the simulated fleet, a real
Prometheus and Alertmanager as child processes (each stopped by its PID), and the webhook that
stands in for on-call (it records what Alertmanager delivered, and when).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from infersight.exposition import generate

PROMETHEUS, ALERTMANAGER = "prometheus", "prometheus-alertmanager"
ON_CALL = ("ticket", "pagerduty", "slack")  # receivers that reach people; gateway and autoscaler are machines
DEBIAN_HINT = "install them with `make debian-tools` (Debian: apt-get install prometheus prometheus-alertmanager)"


class StackError(RuntimeError):
    """A part of the demo did not start; the message says which and how to fix it."""


def require_binaries() -> dict[str, str]:
    found = {name: shutil.which(name) for name in (PROMETHEUS, ALERTMANAGER)}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise StackError(f"{' and '.join(missing)} not found on PATH: {DEBIAN_HINT}")
    return found  # type: ignore[return-value]


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"demo-{handler.__name__}", daemon=True).start()
    return server


def _stop_server(server: ThreadingHTTPServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


def serve_registry(registry) -> ThreadingHTTPServer:
    """``registry`` on 127.0.0.1 (a free port) at /metrics, quiet when a scraper gives up mid-answer
    (Prometheus closes the connection at its scrape timeout on a busy machine)."""

    class Handler(_Quiet):
        def do_GET(self) -> None:  # noqa: N802
            try:
                body = generate(registry)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return _serve(Handler)


class FleetEndpoints:
    """The simulated fleet over HTTP, on one port: the gateway's /metrics (its request and instance-health
    series) and every engine's /metrics in its engine's format (vLLM, SGLang) at ``/engines/<instance>/metrics``.

    :meth:`refresh` renders them all in the fleet's own thread between ticks (the fleet only
    changes there), and requests are answered from that rendering without waiting for the fleet:
    a scrape on a busy machine must not queue behind a tick. A stopped engine answers 503.
    """

    def __init__(self) -> None:
        self.fleet = None  # until the fleet exists the gateway serves nothing
        self.pages: dict[str, tuple[int, bytes]] = {"/gateway/metrics": (200, b"")}
        endpoints = self

        class Handler(_Quiet):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                path = urllib.parse.urlsplit(self.path).path
                status, body = endpoints.pages.get(path, (404, b"not found\n"))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the scraper gave up (its timeout on a busy machine)

        self.server = _serve(Handler)
        self.port = self.server.server_port

    def refresh(self, engines: bool = True) -> None:
        """Render the pages from the fleet's current state (the engines' too unless ``engines`` is
        False: they keep their last rendering); call it from the fleet's thread."""
        from infersight.simulator import formats

        fleet = self.fleet
        pages = {"/gateway/metrics": (200, generate(fleet.metrics.registry))}
        if not engines:
            self.pages = {**self.pages, **pages}
            return
        for engine in fleet.engines():
            page = (200, formats.exposition(engine).encode()) if engine.up else (503, b"engine down\n")
            pages[self.engine_path(engine.instance)] = page
        self.pages = pages  # one reference swap: a request sees the old pages or the new ones

    @staticmethod
    def engine_path(instance: str) -> str:
        return f"/engines/{urllib.parse.quote(instance, safe=':')}/metrics"

    @property
    def gateway_target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        _stop_server(self.server)


@dataclass
class Delivery:
    """One notification Alertmanager sent to a receiver."""

    receiver: str
    received: float  # Unix time
    status: str
    alerts: list[dict[str, Any]]


@dataclass
class Webhook:
    """Alertmanager's receivers, all pointed here: ``/<receiver>`` records each delivery."""

    deliveries: list[Delivery] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Webhook:
        hook = self

        class Handler(_Quiet):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    payload = json.loads(self.rfile.read(min(length, 1 << 22)) or b"{}")
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                receiver = urllib.parse.urlsplit(self.path).path.strip("/") or "unknown"
                with hook.lock:
                    hook.deliveries.append(Delivery(receiver, time.time(), str(payload.get("status", "")),
                                                    list(payload.get("alerts", []))))
                self.send_response(200)
                self.end_headers()

        self.server = _serve(Handler)
        return self

    def url(self, receiver: str) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/{receiver}"

    def snapshot(self) -> list[Delivery]:
        with self.lock:
            return list(self.deliveries)

    def stop(self) -> None:
        _stop_server(self.server)


class Child:
    """A child process (Prometheus, Alertmanager) in its own session, stopped by its PID.

    Started by the constructor; :meth:`wait_ready` waits for its HTTP readiness. Register
    :meth:`stop` before waiting, so that a Ctrl-C during the wait stops it too.
    """

    def __init__(self, name: str, argv: list[str], folder: Path, ready_url: str) -> None:
        self.name, self.ready_url = name, ready_url
        self.log_path = folder / f"{Path(argv[0]).name}.log"
        with open(self.log_path, "wb") as log:
            # its own session: a Ctrl-C in the terminal reaches the demo, which stops it in order
            self.proc = subprocess.Popen(argv, cwd=folder, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise StackError(f"{self.name} exited at start (code {self.proc.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.ready_url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise StackError(f"{self.name} not ready after {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_alertmanager(binary: str, folder: Path, config_file: Path) -> tuple[Child, str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    child = Child("Alertmanager", [binary, f"--config.file={config_file}", f"--storage.path={folder / 'data'}",
                                   f"--web.listen-address=127.0.0.1:{port}",
                                   "--cluster.listen-address="],  # no gossip port: one instance, nothing to join
                  folder, f"{url}/-/ready")
    return child, url


def start_engine_collector(folder: Path, file_sd: Path) -> tuple[Child, int]:
    """``infersight collect engine`` in its own process, as in production, reading its targets from ``file_sd``."""
    port = _free_port()
    child = Child("the engine collector", [sys.executable, "-m", "infersight", "collect", "engine",
                                           f"--file-sd={file_sd}", f"--listen=127.0.0.1:{port}", "--timeout=1.5"],
                  folder, f"http://127.0.0.1:{port}/metrics")
    return child, port


def start_prometheus(binary: str, folder: Path, config_file: Path, lookback: str) -> tuple[Child, str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    child = Child("Prometheus", [binary, f"--config.file={config_file}", f"--storage.tsdb.path={folder / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", f"--query.lookback-delta={lookback}",
                                 "--rules.alert.resend-delay=1s"],
                  folder, f"{url}/-/ready")
    return child, url


def prometheus_query(url: str, path: str, params: dict[str, str], timeout_s: float = 10.0) -> Any:
    full = f"{url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(full, timeout=timeout_s) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise StackError(f"Prometheus {path}: {body}")
    return body["data"]

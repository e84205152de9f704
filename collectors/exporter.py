"""The exporter HTTP server shared by the collectors: serves a registry's /metrics on HOST:PORT."""

from __future__ import annotations

import signal
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from infersight.exposition import generate, without_created


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``127.0.0.1:9835``; port 0 picks a free one); raise ValueError with a usable message."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:9835")
    if int(port) > 65535:
        raise ValueError(f"--listen {listen!r}: the port must be between 0 and 65535")
    return host.strip("[]"), int(port)


def serve(registry: CollectorRegistry, listen: str) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``registry`` on ``listen`` in a daemon thread; port 0 picks a free port.

    Returns the server (``server.server_port`` is the bound port; ``server.shutdown()`` stops it)
    and its thread.
    """
    host, port = parse_listen(listen)
    return start_http_server(port, addr=host, registry=without_created(registry))


class _Collected:
    """Families already collected, as a registry member: render them without collecting again."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)


def exposition_of(families: list) -> str:
    """The text exposition of families one scrape already produced (what each ``--once`` prints)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(families))
    return generate(registry).decode()


def wait_until_stopped() -> None:
    """Block a serving command's main thread until SIGTERM or Ctrl-C; the caller then shuts down."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        while not stopping.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass

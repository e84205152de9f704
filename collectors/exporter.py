"""The exporter HTTP server shared by the collectors: serves a registry's /metrics on HOST:PORT."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from infersight.exposition import without_created


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``127.0.0.1:9835``); raise ValueError with a usable message."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:9835")
    return host.strip("[]"), int(port)


def serve(registry: CollectorRegistry, listen: str) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``registry`` on ``listen`` in a daemon thread; port 0 picks a free port.

    Returns the server (``server.server_port`` is the bound port; ``server.shutdown()`` stops it)
    and its thread.
    """
    host, port = parse_listen(listen)
    return start_http_server(port, addr=host, registry=without_created(registry))

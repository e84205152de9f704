"""The exporter HTTP server shared by the collectors: serves a registry's /metrics on HOST:PORT."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

import infersight.listen
from infersight.exposition import generate, without_created
from infersight.listen import Listen


def parse_listen(listen: str) -> Listen:
    """``--listen HOST:PORT`` (``127.0.0.1:9835``; port 0 picks a free one); a ValueError says what is wrong."""
    return infersight.listen.parse_listen(listen, what="--listen")


def serve(registry: CollectorRegistry, listen: str | Listen) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``registry`` on ``listen`` in a daemon thread; port 0 picks a free port.

    Returns the server (``server.server_port`` is the bound port; ``server.shutdown()`` stops it)
    and its thread.
    """
    address = listen if isinstance(listen, Listen) else parse_listen(listen)
    return start_http_server(address.port, addr=address.host, registry=without_created(registry))


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


def once_or_serve(collector, args, default_listen: str, once: Callable[[Any, str], int],
                  serve_on: Callable[[Any, Listen], int], fail: Callable[[str], int]) -> int:
    """A collector command's ending: with ``--once`` one collection printed in ``--format``, else served on
    ``--listen`` (or ``default_listen``, the config's listener) until stopped; the collector is closed either way."""
    try:
        if args.once:
            return once(collector, args.format)
        try:
            address = parse_listen(args.listen or default_listen)
        except ValueError as exc:
            return fail(str(exc))
        return serve_on(collector, address)
    finally:
        collector.close()


def serve_until_stopped(command: str, registry: CollectorRegistry, listen: Listen, what: str,
                        announce: TextIO | None = None) -> int:
    """Serve ``registry`` on ``listen`` until SIGTERM or Ctrl-C, saying ``what`` is served where; exit code.

    The address line goes to ``announce`` (stderr unless told). A port that cannot be bound is exit 2
    with a message naming the address (``infersight COMMAND: ...``).
    """
    from infersight.commands.output import fail

    try:
        server, _thread = serve(registry, listen)
    except OSError as exc:
        return fail(command, f"cannot listen on {listen}: {exc.strerror or exc} (is the port in use? pick another "
                             "with --listen)")
    print(f"infersight: serving {what} on http://{listen.with_port(server.server_port)}/metrics",
          file=announce or sys.stderr, flush=True)
    try:
        wait_until_stopped()
    finally:
        server.shutdown()
        server.server_close()
    return 0

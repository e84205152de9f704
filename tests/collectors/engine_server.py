"""A local stand-in for engine /metrics endpoints (no inference engine can run here).

One ThreadingHTTPServer on 127.0.0.1, port 0. Each path is a route: a fixture served as the
engine would serve it, or a misbehaving target (slow, trickling, garbage, HTTP 500, huge).
"""

from __future__ import annotations

import http.server
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.conftest import FIXTURES

VLLM = (FIXTURES / "metrics" / "vllm_metrics_sample.txt").read_text()
PREFIX_LINE = re.compile(r"^(vllm:prefix_cache_(hits|queries)_total\{[^}]*\}) [0-9.e+]+$", re.M)
GENERATION_LINE = re.compile(r"^(vllm:generation_tokens_total\{[^}]*\}) [0-9.e+]+$", re.M)


class LiveVLLM:
    """The vLLM fixture with growing counters: 50 prefix-cache hits per 100 queried tokens per scrape,
    and ``tokens_per_second`` generated tokens, counted from the clock (exact rates however late a
    thread runs)."""

    def __init__(self, tokens_per_second: float = 100.0) -> None:
        self.tokens_per_second = tokens_per_second
        self.scrapes = 0
        self.start = time.monotonic()

    def __call__(self) -> bytes:
        self.scrapes += 1
        step = {"hits": 50, "queries": 100}
        text = PREFIX_LINE.sub(lambda m: f"{m.group(1)} {float(self.scrapes * step[m.group(2)])}", VLLM)
        tokens = self.tokens_per_second * (time.monotonic() - self.start)
        return GENERATION_LINE.sub(lambda m: f"{m.group(1)} {tokens}", text).encode()


@dataclass
class Route:
    body: Callable[[], bytes]
    status: int = 200
    delay: float = 0.0  # seconds before the status line
    trickle: float = 0.0  # seconds between single bytes of the body


class _Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # socketserver's default of 5 drops concurrent connects: the collector's are many


class EngineServer:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.hits: dict[str, int] = {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                route = server.routes.get(self.path)
                server.hits[self.path] = server.hits.get(self.path, 0) + 1
                if route is None:
                    self.send_error(404)
                    return
                time.sleep(route.delay)
                body = route.body()
                self.send_response(route.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                if not route.trickle:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    if route.trickle:
                        for i in range(len(body)):
                            self.wfile.write(body[i:i + 1])
                            self.wfile.flush()
                            time.sleep(route.trickle)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the collector gave up on us, as it should

            def log_message(self, *args) -> None:
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, path: str, body: bytes | str | Callable[[], bytes], **kwargs) -> str:
        """Serve ``body`` at ``path``; returns the URL."""
        if isinstance(body, str):
            body = body.encode()
        self.routes[path] = Route(body if callable(body) else (lambda b=body: b), **kwargs)
        return self.url(path)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

"""The proxy's aiohttp application: routes, the upstream session, /metrics, and a runner.

``/v1/chat/completions`` and ``/v1/completions`` (POST) are instrumented; ``/metrics`` serves the
proxy's own registry; every other path is relayed unchanged to the upstream.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from yarl import URL

from infersight.exposition import CONTENT_TYPE_LATEST, generate
from infersight.instances import instance_name
from infersight.instrumentation.proxy import errors, passthrough
from infersight.instrumentation.proxy.deadlines import Timeouts
from infersight.instrumentation.proxy.exchange import INSTRUMENTED_PATHS, Exchange
from infersight.instrumentation.tracer import RequestTracer

log = logging.getLogger(__name__)
# Prompts with images or long documents exceed aiohttp's 1 MiB default request size.
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_BUFFERED_RESPONSE_BYTES = 64 * 1024 * 1024
CONNECT_TIMEOUT_SECONDS = 10.0


def parse_upstream(upstream: str) -> URL:
    """Validate ``--upstream`` (``http://engine:8000``, optionally with a path prefix)."""
    url = URL(upstream)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"--upstream {upstream!r}: expected an http(s) URL such as http://engine:8000")
    if url.query_string or url.fragment:
        raise ValueError(f"--upstream {upstream!r}: must not carry a query or fragment")
    return url


@dataclass
class ProxyContext:
    """What every request handler shares: where to forward, how long to wait, where to record."""

    upstream: URL
    timeouts: Timeouts
    tracer: RequestTracer  # records metrics and spans; its registry is served on /metrics
    pool: str = ""  # the pool label of the proxied engine (stable, canary ...), if any
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    # Non-streaming answers and error bodies are read whole before relaying (so a timeout can still
    # answer 504); this bounds the memory one of them may take.
    max_buffered_response_bytes: int = DEFAULT_MAX_BUFFERED_RESPONSE_BYTES
    session: aiohttp.ClientSession | None = field(default=None)
    # Ask the engine to count tokens per streamed chunk (stream_options.continuous_usage_stats); turned
    # off for good when the upstream refuses it (HTTP 400/422 to a request that carried it, while the
    # client's own body, sent next, gets through).
    stream_usage: bool = True

    def refuse_stream_usage(self) -> None:
        if self.stream_usage:
            self.stream_usage = False
            log.warning("infersight proxy: %s refused stream_options.continuous_usage_stats; token counts fall "
                        "back to streamed chunks (a lower bound) with usage when the client asks for it",
                        self.upstream_label)

    @property
    def upstream_label(self) -> str:
        """``host:port`` of the upstream: the ``instance`` of the proxy's metrics and spans (DESIGN 10)."""
        return instance_name(self.upstream.host or "", self.upstream.port or 80)

    def upstream_url(self, request: web.Request) -> URL:
        # raw_path keeps the client's encoding and query string exactly as sent.
        base = str(self.upstream).rstrip("/")
        return URL(base + request.raw_path, encoded=True)


def build_app(context: ProxyContext) -> web.Application:
    app = web.Application(client_max_size=context.max_request_bytes)

    async def session_lifecycle(app: web.Application):
        context.session = aiohttp.ClientSession(
            auto_decompress=False,  # relay bytes as the upstream sent them
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECONDS),
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            # Send only what the client sent: aiohttp would otherwise add its own User-Agent, Accept and
            # Accept-Encoding (gzip), and the client could get a compressed body it never asked for.
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        )
        yield
        await context.session.close()

    async def metrics(request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate, context.tracer.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def forward(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            error = errors.request_too_large(context.max_request_bytes)
            return web.Response(status=error.status, body=error.body(), content_type="application/json")
        operation = INSTRUMENTED_PATHS.get(request.path)
        if operation is not None and request.method == "POST":
            return await Exchange(context, request, operation).run(body)
        return await passthrough.relay(context, request, body)

    app.cleanup_ctx.append(session_lifecycle)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


async def start(context: ProxyContext, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start serving on ``host:port`` (0 picks a free port); returns the runner and the bound port.

    Handler cancellation is on: when a client disconnects, aiohttp cancels its handler, and the
    handler's cleanup closes the upstream connection, so the engine stops generating for nobody.
    """
    runner = web.AppRunner(build_app(context), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]  # the port the OS picked for port 0: (host, port[, ...]) of the site's socket
    return runner, bound

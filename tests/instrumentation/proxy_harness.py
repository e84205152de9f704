"""Runs the engine stand-in and the real proxy on one background event loop, for synchronous tests.

The tests then talk to the proxy over real sockets with the real ``openai`` client (or aiohttp
for raw bytes), exactly as a deployment would.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from collections.abc import Coroutine
from typing import Any

from aiohttp import web
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from infersight import attributes as attr
from infersight.instrumentation.proxy import app as proxy_app
from infersight.instrumentation.proxy.deadlines import Timeouts
from infersight.instrumentation.sampling import TailSampler
from infersight.instrumentation.tracer import RequestTracer
from infersight.signals.catalog import Signal
from tests.instrumentation.engine_standin import EngineStandin


class LoopThread:
    """An asyncio loop in a daemon thread; ``call(coro)`` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


class ProxyStack:
    """Engine stand-in + proxy in front of it, recording into an in-memory span exporter.

    ``upstream`` overrides the proxy's target (e.g. a port nobody listens on).
    """

    def __init__(self, timeouts: Timeouts | None = None, upstream: str | None = None,
                 tracer: RequestTracer | None = None, **context_options) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = tracer or RequestTracer(tracer_provider=provider, sampler=TailSampler(random_share=0.0))
        self.loop = LoopThread()
        self.engine = EngineStandin()
        self._runners: list[web.AppRunner] = []
        engine_runner, engine_port = self.loop.call(serve(self.engine.app()))
        self._runners.append(engine_runner)
        self.engine_url = f"http://127.0.0.1:{engine_port}"
        self.context = proxy_app.ProxyContext(
            upstream=proxy_app.parse_upstream(upstream or self.engine_url), timeouts=timeouts or Timeouts(),
            tracer=self.tracer, **context_options)
        proxy_runner, proxy_port = self.loop.call(proxy_app.start(self.context, "127.0.0.1", 0))
        self._runners.append(proxy_runner)
        self.url = f"http://127.0.0.1:{proxy_port}"

    def request_spans(self) -> list:
        """Finished request spans (the ones carrying an outcome), oldest first."""
        return [s for s in self.exporter.get_finished_spans() if attr.REQUEST_OUTCOME in (s.attributes or {})]

    def wait_request_span(self, count: int = 1, timeout: float = 5.0):
        """The ``count``-th request span, waiting for it (a cancel is recorded asynchronously)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.request_spans()
            if len(spans) >= count:
                return spans[count - 1]
            time.sleep(0.01)
        raise AssertionError(f"no request span #{count} after {timeout}s: {self.exporter.get_finished_spans()}")

    def upstream_span(self, request_span):
        return next(s for s in self.exporter.get_finished_spans()
                    if s.parent is not None and s.parent.span_id == request_span.context.span_id
                    and s.name == attr.SPAN_UPSTREAM)

    def metric(self, signal: Signal, suffix: str = "", **labels: str) -> float:
        """A sample's value from the proxy's /metrics text (0 when absent)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == signal.name + suffix and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0

    def close(self) -> None:
        for runner in reversed(self._runners):
            self.loop.call(runner.cleanup())
        self.loop.stop()

"""Running the proxy as a service: tracing from the config, serve until SIGINT/SIGTERM, flush spans."""

from __future__ import annotations

import asyncio
import signal
import sys

from prometheus_client import CollectorRegistry

from infersight.config import Config
from infersight.instrumentation.otlp_metrics import push_from_config
from infersight.instrumentation.proxy import app as proxy_app
from infersight.instrumentation.proxy.deadlines import Timeouts
from infersight.instrumentation.sampling import TailSampler
from infersight.instrumentation.tracer import RequestTracer
from infersight.instrumentation.tracing_setup import TracingSetupError, setup_tracing_from_config
from infersight.listen import Listen, parse_listen


def run(config: Config, *, listen: str, upstream: str, timeouts: Timeouts, pool: str = "",
        provider_name: str | None = None, service_name: str = "infersight-proxy",
        max_request_bytes: int = proxy_app.DEFAULT_MAX_REQUEST_BYTES, stream_usage: bool = True) -> int:
    """Serve until interrupted; returns the exit code. Bad arguments print a message and return 2."""
    try:
        address = parse_listen(listen, what="--listen", example="127.0.0.1:8081")
        upstream_url = proxy_app.parse_upstream(upstream)
    except ValueError as exc:
        print(f"infersight proxy: {exc}", file=sys.stderr)
        return 2
    registry = CollectorRegistry()
    try:
        tracing = setup_tracing_from_config(config.tracing, service_name, registry=registry,
                                            listeners=config.listeners)
    except TracingSetupError as exc:
        print(f"infersight proxy: tracing setup: {exc}", file=sys.stderr)
        return 2
    sampler = TailSampler.from_config(config.tracing)
    tracer = RequestTracer(registry=registry, tracer_provider=tracing.provider, sampler=sampler,
                           provider_name=provider_name)
    context = proxy_app.ProxyContext(upstream=upstream_url, timeouts=timeouts, tracer=tracer, pool=pool,
                                     max_request_bytes=max_request_bytes, stream_usage=stream_usage)
    metrics_push = push_from_config(config.tracing, registry, service_name, provider_name)
    try:
        return asyncio.run(_serve(context, address))
    finally:
        tracing.shutdown()  # exports the spans still queued
        if metrics_push is not None:
            metrics_push.shutdown()  # one last push of the request metrics


async def _serve(context: proxy_app.ProxyContext, address: Listen) -> int:
    try:
        runner, bound = await proxy_app.start(context, address.host, address.port)
    except OSError as exc:
        print(f"infersight proxy: cannot listen on {address}: {exc.strerror or exc} "
              "(pick another --listen port, or stop what holds this one)", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    print(f"infersight proxy: listening on http://{address.with_port(bound)} -> {context.upstream} "
          f"(metrics on /metrics)", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0

"""``infersight proxy``: the instrumenting reverse proxy for OpenAI-compatible engines."""

from __future__ import annotations

import argparse

PROXY_DESCRIPTION = """\
Put this in front of any OpenAI-compatible engine (vLLM, SGLang, TGI ...) to get request metrics
and traces without touching the engine. /v1/chat/completions and /v1/completions (streaming or
not) are relayed byte for byte and instrumented: streamed tokens are timed one by one (the proxy
asks the engine for per-chunk usage, stream_options.continuous_usage_stats, and relays only the
usage the client asked for itself), usage is read when present, the W3C traceparent
is continued (or a trace started), spans go out over OTLP (tracing section of the config, else
listeners.otlp_grpc, or OTEL_* variables) and the catalog metrics
are served on /metrics of the listen address (scrape the engine's own /metrics directly). An
X-Request-Id header becomes the span's llm.request.id. Every other path is relayed unchanged.

On a timeout the client gets an OpenAI-style error (HTTP 504, or a final SSE error event when
the stream had started) and the upstream request is cancelled; so is it when the client leaves.
"""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: a timeout must be >= 0 (0 disables it)")
    return value


def _megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MiB") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be > 0")
    return value


def register(subparsers) -> None:
    p = subparsers.add_parser("proxy", help="instrumenting reverse proxy for OpenAI-compatible engines",
                              description=PROXY_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="where the proxy listens (default: listeners.proxy of the config, 127.0.0.1:8081)")
    p.add_argument("--upstream", metavar="URL", default="http://127.0.0.1:8000",
                   help="the engine's base URL, e.g. http://engine:8000 (default: %(default)s)")
    p.add_argument("--ttft-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                   help="longest wait for the first token; for a non-streaming request, for the whole "
                        "answer (default: %(default)s; 0 disables)")
    p.add_argument("--idle-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                   help="longest gap between streamed tokens after the first (default: %(default)s; 0 disables)")
    p.add_argument("--total-timeout", type=_seconds, default=600.0, metavar="SECONDS",
                   help="longest request, start to end (default: %(default)s; 0 disables)")
    p.add_argument("--max-request-mb", type=_megabytes, default=64.0, metavar="MB",
                   help="largest request body accepted, in MiB; larger ones get HTTP 413 (default: %(default)s)")
    p.add_argument("--pool", default="", help="pool label for the metrics and spans, e.g. stable or canary")
    p.add_argument("--provider", metavar="NAME",
                   help="gen_ai.provider.name on the spans: the engine kind, e.g. vllm or sglang")
    p.add_argument("--service-name", default="infersight-proxy", help="OTel service.name (default: %(default)s)")
    p.add_argument("--no-stream-usage", dest="stream_usage", action="store_false",
                   help="relay streaming requests exactly as sent (no per-chunk usage asked for): tokens are then "
                        "counted one per text chunk, a lower bound")
    p.set_defaults(func=_proxy)


def _proxy(args, config) -> int:
    from infersight.instrumentation.proxy import service
    from infersight.instrumentation.proxy.deadlines import Timeouts

    return service.run(config, listen=args.listen or config.listeners.proxy, upstream=args.upstream,
                       timeouts=Timeouts(ttft=args.ttft_timeout, idle=args.idle_timeout, total=args.total_timeout),
                       pool=args.pool, provider_name=args.provider, service_name=args.service_name,
                       max_request_bytes=int(args.max_request_mb * 1024 * 1024), stream_usage=args.stream_usage)

"""``infersight collect gateway``: scrape gateways and routers and serve their series as catalog signals."""

from __future__ import annotations

import argparse
import functools
import sys

from infersight.commands.output import FORMATS, Format, add_format_flag, fail
from infersight.listen import Listen

EPILOG = """\
targets come from gateways.targets in the config and --target (repeatable). KIND is one of auto,
epp (llm-d's endpoint picker), vllm-router (vLLM production-stack), litellm, otel-genai (OTel GenAI
metrics, e.g. Envoy AI Gateway); auto detects it from the exposition.

examples:
  infersight collect gateway --target epp=http://epp.llm-d:9090/metrics
  infersight collect gateway --target http://vllm-router:8001/metrics --once --format table
  infersight collect gateway --target litellm=http://litellm:4000/metrics --listen 127.0.0.1:9837
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gateway", help="scrape llm-d EPP, production-stack router, LiteLLM, OTel GenAI gateways as llm_* signals",
        description="Scrape the gateways and routers in front of the engines and serve their series as the "
                    "catalog's gateway and request signals (llm_gateway_queue_depth, llm_requests_total, TTFT ...), "
                    "with instance = the backend endpoint where the product names it. A failed target exposes "
                    "infersight_gateway_source_up 0 and no other series.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", action="append", default=[], metavar="[KIND=]URL",
                   help="a gateway /metrics URL, e.g. epp=http://epp:9090/metrics (repeatable)")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="where to serve /metrics (default: listeners.gateway_exporter, 127.0.0.1:9837)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="per-target scrape timeout (default: gateways.timeout_seconds, 2)")
    p.add_argument("--once", action="store_true", help="scrape once, print and exit (1 if a target failed)")
    add_format_flag(p, Format.PROMETHEUS, (Format.PROMETHEUS, *FORMATS),
                    help="with --once: prometheus prints the normalized exposition (prom, its old name, still "
                         "works); table, json and csv one row per target (default: prometheus)")
    p.set_defaults(func=run)


_fail = functools.partial(fail, "collect gateway")


def run(args, config) -> int:
    from infersight.collectors.exporter import once_or_serve

    from .collector import GatewayCollector, TargetError, from_config, parse_target_arg

    gateways = config.gateways
    timeout = args.timeout if args.timeout is not None else gateways.timeout_seconds
    if timeout <= 0:
        return _fail("--timeout must be positive")
    try:
        targets = from_config(gateways) + [parse_target_arg(spec) for spec in args.target]
        collector = GatewayCollector(targets, timeout=timeout, max_bytes=gateways.max_bytes,
                                     log_changes=not args.once)
    except TargetError as exc:
        return _fail(str(exc))
    return once_or_serve(collector, args, config.listeners.gateway_exporter, _once, _serve, _fail)


def _once(collector, fmt: str) -> int:
    from infersight.collectors.exporter import exposition_of
    from infersight.commands.output import render

    results = collector.scrape()
    if fmt == Format.PROMETHEUS:
        sys.stdout.write(exposition_of(collector.families(results)))
    else:
        print(render([r.row() for r in results], fmt, ["source", "kind", "up", "series", "seconds", "error",
                                                      "detail"]))
    failed = [r for r in results if not r.up]
    for r in failed:
        print(f"infersight: gateway {r.target.name} ({r.target.url}) failed: {r.reason}: {r.detail}",
              file=sys.stderr)
    return 1 if failed else 0


def _serve(collector, listen: Listen) -> int:
    from infersight.collectors.exporter import serve_until_stopped

    from .collector import build_registry

    return serve_until_stopped("collect gateway", build_registry(collector), listen,
                               f"{len(collector.targets)} gateway source(s)")

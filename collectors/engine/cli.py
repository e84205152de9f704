"""``infersight collect engine``: scrape engine /metrics and serve them normalized."""

from __future__ import annotations

import argparse
import functools
import sys

from infersight.commands.output import FORMATS, Format, add_format_flag, fail
from infersight.listen import Listen

EPILOG = """\
targets come from engines.targets in the config, --target (repeatable) and a file_sd file
(--file-sd or engines.file_sd, re-read when it changes). ENGINE is one of auto, vllm, sglang,
tgi, triton, trtllm (auto detects it from the exposition).

examples:
  infersight collect engine --target vllm=http://10.0.0.5:8000/metrics
  infersight collect engine --target http://127.0.0.1:30000/metrics --once
  infersight collect engine --file-sd engines.json --listen 127.0.0.1:9836
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "engine", help="scrape vLLM, SGLang, TGI, TensorRT-LLM /metrics and serve them as normalized llm_* metrics",
        description="Scrape inference engines' /metrics concurrently and serve one normalized vocabulary "
                    "(llm_* signals) on 127.0.0.1. A failed target exposes llm_engine_up 0 and no other series.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", action="append", default=[], metavar="[ENGINE=]URL",
                   help="an engine /metrics URL, e.g. vllm=http://host:8000/metrics (repeatable)")
    p.add_argument("--file-sd", metavar="PATH", help="Prometheus file_sd JSON/YAML file with more targets "
                                                     "(default: engines.file_sd)")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="where to serve /metrics (default: listeners.engine_exporter, 127.0.0.1:9836)")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="per-target scrape timeout "
                                                                    "(default: engines.timeout_seconds, 2)")
    p.add_argument("--max-bytes", type=int, metavar="N", help="per-target body size limit "
                                                              "(default: engines.max_bytes, 8 MiB)")
    p.add_argument("--once", action="store_true",
                   help="run one collection cycle, print it and exit (1 if any target or the file_sd file failed)")
    add_format_flag(p, Format.PROMETHEUS, (Format.PROMETHEUS, *FORMATS),
                    help="with --once: prometheus prints the normalized exposition (prom, its old name, still "
                         "works); table, json and csv print one status row per target (default: prometheus)")
    p.set_defaults(func=run)


def run(args, config) -> int:
    from ..exporter import once_or_serve
    from .collector import EngineCollector
    from .targets import TargetError, from_config, parse_target_arg

    engines = config.engines
    timeout = args.timeout if args.timeout is not None else engines.timeout_seconds
    max_bytes = args.max_bytes if args.max_bytes is not None else engines.max_bytes
    if timeout <= 0 or max_bytes <= 0:
        return _fail("--timeout and --max-bytes must be positive")
    file_sd = args.file_sd or engines.file_sd
    try:
        targets = from_config(engines) + [parse_target_arg(spec) for spec in args.target]
        # --once reports failures itself, after the output.
        collector = EngineCollector(targets, file_sd, timeout=timeout, max_bytes=max_bytes, log_changes=not args.once)
    except TargetError as exc:
        return _fail(str(exc))
    if not targets and not file_sd:
        return _fail("no engine targets: pass --target ENGINE=URL, --file-sd PATH, or set engines.targets "
                     "in infersight.yaml")
    return once_or_serve(collector, args, config.listeners.engine_exporter, _once, _serve, _fail)


def _once(collector, fmt: str) -> int:
    from infersight.commands.output import render

    from ..exporter import exposition_of

    cycle = collector.run_cycle()
    if cycle.file_sd_error:
        print(f"infersight: file_sd: {cycle.file_sd_error}", file=sys.stderr)
    if fmt == Format.PROMETHEUS:
        sys.stdout.write(exposition_of(cycle.families))
    else:
        print(render([r.row() for r in cycle.results], fmt,
                     ["instance", "engine", "up", "series", "seconds", "error", "detail"]))
    failed = [r for r in cycle.results if not r.up]
    for r in failed:
        print(f"infersight: target {r.target.instance} ({r.target.url}) failed: {r.reason}: {r.detail}",
              file=sys.stderr)
    return 1 if failed or cycle.file_sd_error else 0


def _serve(collector, listen: Listen) -> int:
    from prometheus_client import CollectorRegistry

    from ..exporter import serve_until_stopped

    registry = CollectorRegistry()
    registry.register(collector)
    return serve_until_stopped("collect engine", registry, listen, "normalized engine metrics")


_fail = functools.partial(fail, "collect engine")

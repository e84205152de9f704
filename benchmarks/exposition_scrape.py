"""Scrape cost of the request metrics at 1,000 label sets: our exposition against prometheus_client's.

    .venv/bin/python benchmarks/exposition_scrape.py [--label-sets 1000] [--rounds 7]

A RequestTracer registry with ``--label-sets`` (model, instance, pool, strategy) combinations, each
with finished requests (so every histogram and counter child exists), rendered in each round by
prometheus_client's ``generate_latest`` (the baseline, with its ``_created`` series) and by
``infersight.exposition.generate`` (without them), interleaved. Prints the best of the rounds in
ms, lines and bytes per scrape, and the ratios; the goal (issue 18) is < 50 ms at 1,000 label sets.
"""

from __future__ import annotations

import argparse
import sys
import time

from opentelemetry.trace import NoOpTracerProvider
from prometheus_client import CollectorRegistry, generate_latest

from infersight.exposition import generate
from infersight.instrumentation import RequestTracer

GOAL_MS = 50.0


def fleet_registry(label_sets: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    tracer = RequestTracer(registry=registry, tracer_provider=NoOpTracerProvider())
    for n in range(label_sets):
        with tracer.start(f"model-{n % 4}", instance=f"10.0.{n // 250}.{n % 250}:8000",
                          pool="canary" if n % 10 == 0 else "stable", strategy="cache_aware") as req:
            req.queued()
            req.routed(f"10.0.{n // 250}.{n % 250}:8000")
            req.token()
            req.token()
            req.finish("stop", input_tokens=100, output_tokens=2, cached_input_tokens=64)
    return registry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label-sets", type=int, default=1000, help="request-metric label sets (default 1000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds, interleaved; the best is reported")
    args = parser.parse_args(argv)
    if not 1 <= args.label_sets <= 20_000 or args.rounds < 1:
        parser.error("--label-sets within 1..20000 and --rounds >= 1")
    registry = fleet_registry(args.label_sets)
    renderers = {"prometheus_client generate_latest (baseline)": generate_latest, "infersight generate": generate}
    best = {name: float("inf") for name in renderers}
    size = {}
    for _ in range(args.rounds):
        for name, render in renderers.items():
            started = time.perf_counter()
            body = render(registry)
            best[name] = min(best[name], (time.perf_counter() - started) * 1000)
            size[name] = (body.count(b"\n"), len(body))
    base = best["prometheus_client generate_latest (baseline)"]
    print(f"one scrape of {args.label_sets:,} request-metric label sets, best of {args.rounds} rounds")
    print(f"{'renderer':<48}{'ms':>9}{'lines':>10}{'MB':>8}{'x baseline':>12}")
    for name, ms in best.items():
        lines, nbytes = size[name]
        print(f"{name:<48}{ms:>9.1f}{lines:>10,}{nbytes / 1e6:>8.2f}{ms / base:>12.2f}")
    ours = best["infersight generate"]
    print(f"\ngoal < {GOAL_MS:.0f} ms: {'met' if ours < GOAL_MS else 'NOT met'} ({ours:.0f} ms; "
          f"{size['prometheus_client generate_latest (baseline)'][0] - size['infersight generate'][0]:,} "
          f"_created lines fewer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

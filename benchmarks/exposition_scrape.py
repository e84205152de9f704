"""Scrape cost of the request metrics at 1,000 label sets: our exposition against prometheus_client's.

    .venv/bin/python benchmarks/exposition_scrape.py [--label-sets 1000] [--rounds 7] [--format json]

A RequestTracer registry with ``--label-sets`` (model, instance, pool, strategy) combinations, each
with finished requests (so every histogram and counter child exists), rendered in each round,
interleaved, by:
- prometheus_client's ``generate_latest`` of the same registry (the baseline): it reads the
  families' samples, built from the same snapshot;
- prometheus_client metrics (before): the same series held in prometheus_client's own Histogram,
  Counter and Gauge children (what the tracer used before), ``generate_latest`` with its
  ``_created`` series;
- ``infersight.exposition.generate`` of the tracer's registry: what /metrics serves.
Every run checks that the three parse to the same samples (``_created`` aside). Prints the best
of the rounds in wall and CPU ms (this thread's CPU time: what other jobs on a shared machine
inflate least), lines and bytes per scrape, the ratios, and the load average; the goal (issue 18)
is < 50 ms at 1,000 label sets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from opentelemetry.trace import NoOpTracerProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infersight.exposition import generate
from infersight.instrumentation import RequestTracer
from infersight.instrumentation.series import Family
from infersight.signals.catalog import Kind

GOAL_MS = 50.0


def fleet_tracer(label_sets: int) -> RequestTracer:
    tracer = RequestTracer(registry=CollectorRegistry(), tracer_provider=NoOpTracerProvider())
    for n in range(label_sets):
        with tracer.start(f"model-{n % 4}", instance=f"10.0.{n // 250}.{n % 250}:8000",
                          pool="canary" if n % 10 == 0 else "stable", strategy="cache_aware") as req:
            req.queued()
            req.routed(f"10.0.{n // 250}.{n % 250}:8000")
            req.token()
            req.token()
            req.finish("stop", input_tokens=100, output_tokens=2, cached_input_tokens=64)
    return tracer


def fleet_registry(label_sets: int) -> CollectorRegistry:
    return fleet_tracer(label_sets).registry


def native_twin(tracer: RequestTracer) -> CollectorRegistry:
    """The same series in prometheus_client's own metric children (the tracer's metrics before)."""
    registry = CollectorRegistry()
    for family in vars(tracer.metrics).values():
        if not isinstance(family, Family):
            continue
        metric = family.signal.register(registry)
        for labels, cell in family._children:
            child = metric.labels(*labels)
            if family.signal.kind is Kind.HISTOGRAM:
                # Each observation at its bucket's bound, then the sum corrected with one zero-width step.
                for bound, count in zip([*family.bounds, family.bounds[-1] * 2], cell[:-1], strict=True):
                    for _ in range(count):
                        child.observe(bound)
                child._sum.set(cell[-1])
            elif family.signal.kind is Kind.GAUGE:
                child.set(cell[0])
            else:
                child.inc(cell[0])
    return registry


def samples(body: bytes) -> set:
    return {(s.name, tuple(sorted(s.labels.items())), s.value) for f in text_string_to_metric_families(body.decode())
            for s in f.samples if not s.name.endswith("_created")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label-sets", type=int, default=1000, help="request-metric label sets (default 1000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds, interleaved; the best is reported")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    if not 1 <= args.label_sets <= 20_000 or args.rounds < 1:
        parser.error("--label-sets within 1..20000 and --rounds >= 1")
    tracer = fleet_tracer(args.label_sets)
    registry, before = tracer.registry, native_twin(tracer)
    baseline = "prometheus_client generate_latest (baseline)"
    renderers = {baseline: lambda: generate_latest(registry),
                 "prometheus_client metrics (before)": lambda: generate_latest(before),
                 "infersight generate": lambda: generate(registry)}
    best = {name: float("inf") for name in renderers}
    cpu = dict(best)
    size, bodies = {}, {}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for name, render in renderers.items():
            started, started_cpu = time.perf_counter(), time.thread_time()
            body = render()
            best[name] = min(best[name], (time.perf_counter() - started) * 1000)
            cpu[name] = min(cpu[name], (time.thread_time() - started_cpu) * 1000)
            size[name], bodies[name] = (body.count(b"\n"), len(body)), body
        load.append(os.getloadavg()[0])
    reference = samples(bodies[baseline])
    same = {name: samples(body) == reference for name, body in bodies.items()}
    base, ours = best[baseline], best["infersight generate"]
    if args.format == "json":
        print(json.dumps({"label_sets": args.label_sets, "rounds": args.rounds, "best_ms": best, "best_cpu_ms": cpu,
                          "lines": {n: v[0] for n, v in size.items()}, "bytes": {n: v[1] for n, v in size.items()},
                          "ours_vs_baseline": ours / base, "same_samples": same, "goal_ms": GOAL_MS,
                          "goal_met": ours < GOAL_MS, "load_average_1m": [min(load), max(load)]}, indent=2))
        return 0
    print(f"one scrape of {args.label_sets:,} request-metric label sets, best of {args.rounds} rounds "
          f"(load average {min(load):.2f}-{max(load):.2f} on {os.cpu_count()} CPUs)")
    print(f"{'renderer':<48}{'ms':>9}{'CPU ms':>9}{'lines':>10}{'MB':>8}{'x baseline':>12}{'same samples':>14}")
    for name, ms in best.items():
        lines, nbytes = size[name]
        print(f"{name:<48}{ms:>9.1f}{cpu[name]:>9.1f}{lines:>10,}{nbytes / 1e6:>8.2f}{ms / base:>12.3f}"
              f"{str(same[name]):>14}")
    print(f"\ngoal < {GOAL_MS:.0f} ms: {'met' if ours < GOAL_MS else 'NOT met'} ({ours:.1f} ms wall, "
          f"{cpu['infersight generate']:.1f} ms CPU; {base / ours:.0f}x faster than the baseline in this run)")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

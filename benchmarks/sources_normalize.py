"""Benchmark the source mappings: one dcgm-exporter scrape and one scrape of each gateway product.

    .venv/bin/python benchmarks/sources_normalize.py [--iterations 30] [--gpus 8]

Each row is the median time to turn one exposition into catalog series, printed side by side with a
baseline run in the same process on the same text: prometheus_client's parser over the whole text
(what a straightforward mapper pays before mapping anything), and the ratio ours / baseline.
- dcgm: the default-counters fixture repeated for N GPUs (8 by default), parse + map + series.
- gateways: each fixture of tests/fixtures/gateways (detection, line filter, parse, map).
Target: ours within 2x of the bare parse (the mapping costs less than the parsing it needs anyway).
Absolute times follow the machine's load; the ratio is the figure. Bounded: a fixed number of
iterations per row.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from infersight.collectors.gateway.normalize import normalize
from infersight.collectors.gpu.dcgm import parse
from infersight.collectors.gpu.dcgm_collector import gpu_series

ROOT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
TARGET_RATIO = 2.0


def median_ms(fn, iterations: int) -> float:
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def dcgm_text(gpus: int) -> str:
    """The two-GPU fixture's samples repeated with GPU indices 0..N-1 (each GPU its own UUID)."""
    text = (ROOT / "metrics" / "dcgm_exporter_metrics_rendered.txt").read_text()
    lines = []
    for line in text.splitlines():
        if line.startswith("#") or 'gpu="1"' in line:
            if line.startswith("#"):
                lines.append(line)
            continue
        for index in range(gpus):
            lines.append(re.sub(r'gpu="0",UUID="GPU-[^"]*"', f'gpu="{index}",UUID="GPU-{index:08d}"', line))
    return "\n".join(lines) + "\n"


def baseline(text: str) -> None:
    for family in text_string_to_metric_families(text):
        for _sample in family.samples:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--format", choices=("table", "json"), default="table")
    args = parser.parse_args()
    rows = []
    dcgm = dcgm_text(args.gpus)
    rows.append(("dcgm", f"{args.gpus} GPUs", dcgm,
                 lambda: [s for g in parse(dcgm) for s in gpu_series(g)]))
    for path in sorted((ROOT / "gateways").glob("*.txt")):
        text = path.read_text()
        rows.append((normalize(text).kind, path.name, text, lambda text=text: normalize(text)))
    results = []
    for kind, source, text, ours in rows:
        ours_ms = median_ms(ours, args.iterations)
        base_ms = median_ms(lambda text=text: baseline(text), args.iterations)
        results.append({"kind": kind, "source": source, "lines": text.count("\n"), "ours_ms": round(ours_ms, 3),
                        "baseline_parse_ms": round(base_ms, 3), "ratio": round(ours_ms / base_ms, 2),
                        "within_target": ours_ms / base_ms < TARGET_RATIO})
    if args.format == "json":
        print(json.dumps(results, indent=2))
        return
    print(f"median of {args.iterations} runs; baseline: prometheus_client's parser over the whole text; "
          f"target: ratio < {TARGET_RATIO:g}")
    print(f"{'kind':<12}{'source':<45}{'lines':>7}{'ours ms':>10}{'baseline ms':>13}{'ratio':>8}")
    for r in results:
        print(f"{r['kind']:<12}{r['source']:<45}{r['lines']:>7}{r['ours_ms']:>10.3f}{r['baseline_parse_ms']:>13.3f}"
              f"{r['ratio']:>8.2f}")


if __name__ == "__main__":
    main()

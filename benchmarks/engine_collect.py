"""Benchmark the engine collector: parse + normalize one vLLM target, and a cycle over 100 targets.

    .venv/bin/python benchmarks/engine_collect.py [--targets 100] [--cycles 5]

Figures are printed side by side with a baseline run on the same machine and as ratios:
- per target: our parse + normalize of the ~430-line vLLM fixture vs prometheus_client's
  parser over the whole text (what a straightforward collector would do); target < 5 ms.
- per cycle: one collection cycle over N local targets (served by a separate process so the
  servers do not share our interpreter) vs a sequential fetch-and-parse loop; target < 1 s for 100.
Bounded: a fixed number of iterations and cycles; each scrape has a 2 s timeout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infersight.collectors.engine.collector import EngineCollector
from infersight.collectors.engine.normalize import TargetLabels, normalize
from infersight.collectors.engine.targets import Target

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics" / "vllm_metrics_sample.txt"
TARGET_MS_PER_TARGET = 5.0
TARGET_SECONDS_PER_100 = 1.0

# Serves the fixture on N ports (one small server per port, like N engines) and prints the ports.
SERVERS = r"""
import http.server, json, sys, threading
body = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ports = []
for _ in range(int(sys.argv[2])):
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    s.daemon_threads = True
    threading.Thread(target=s.serve_forever, daemon=True).start()
    ports.append(s.server_address[1])
print(json.dumps(ports), flush=True)
sys.stdin.read()
"""


def median_ms(fn, iterations: int) -> float:
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def per_target(iterations: int) -> None:
    text = FIXTURE.read_text()
    labels = TargetLabels("bench:8000", pool="stable", node="n1", gpu="0")
    ours = median_ms(lambda: normalize(text, labels), iterations)
    baseline = median_ms(lambda: list(text_string_to_metric_families(text)), iterations)
    lines = len(text.splitlines())
    print(f"parse + normalize, vLLM fixture ({lines} lines), median of {iterations}:")
    print(f"  ours      {ours:8.3f} ms/target")
    print(f"  baseline  {baseline:8.3f} ms/target   (prometheus_client parser over the whole text, no mapping)")
    print(f"  ratio     {ours / baseline:8.2f} x baseline;  {ours / TARGET_MS_PER_TARGET:.2f} x the "
          f"{TARGET_MS_PER_TARGET:g} ms target ({'met' if ours < TARGET_MS_PER_TARGET else 'MISSED'})")


def per_cycle(n: int, cycles: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SERVERS, str(FIXTURE), str(n)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        ports = json.loads(proc.stdout.readline())
        urls = [f"http://127.0.0.1:{port}/metrics" for port in ports]
        collector = EngineCollector([Target(url, engine="vllm") for url in urls], timeout=2.0)
        registry = CollectorRegistry()
        registry.register(collector)
        try:
            collector.run_cycle()  # warm-up: thread pool, connections
            cycle_times, scrape_times = [], []
            for _ in range(cycles):
                cycle = collector.run_cycle()
                assert all(r.up for r in cycle.results), [r.row() for r in cycle.results if not r.up][:3]
                cycle_times.append(cycle.seconds)
                # A Prometheus scrape of us: collect() runs a fresh cycle, then the text is rendered.
                start = time.perf_counter()
                exposition = generate_latest(registry)
                scrape_times.append(time.perf_counter() - start)
            series = exposition.count(b"\n") - exposition.count(b"\n#")
        finally:
            collector.close()

        def sequential() -> None:
            for url in urls:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    list(text_string_to_metric_families(resp.read().decode()))

        baseline = median_ms(sequential, max(1, cycles // 2)) / 1000
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    cycle_s = statistics.median(cycle_times)
    scrape_s = statistics.median(scrape_times)
    target_s = TARGET_SECONDS_PER_100 * n / 100
    print(f"\ncollection cycle over {n} local vLLM targets, median of {cycles}:")
    print(f"  ours      {cycle_s:8.3f} s/cycle    ({cycle_s / n * 1000:.2f} ms/target, concurrent)")
    print(f"  scrape    {scrape_s:8.3f} s          (a whole scrape of us: a fresh cycle + rendering {series} series;"
          f" rendering {max(0.0, scrape_s - cycle_s):.3f} s)")
    print(f"  baseline  {baseline:8.3f} s/cycle    (sequential urllib fetch + full parse, no mapping)")
    print(f"  ratio     {cycle_s / baseline:8.2f} x baseline;  {scrape_s / target_s:.2f} x the "
          f"{target_s:g} s target for a whole scrape ({'met' if scrape_s < target_s else 'MISSED'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    per_target(args.iterations)
    per_cycle(args.targets, args.cycles)


if __name__ == "__main__":
    main()

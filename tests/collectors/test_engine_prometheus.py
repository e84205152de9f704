"""A real Prometheus scrapes `infersight collect engine` (the real command, in its own process)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time

import pytest

from infersight.signals import engine as sig
from tests.collectors.engine_server import EngineServer
from tests.conftest import FIXTURES, free_port, require_tool, wait_http

VLLM = (FIXTURES / "metrics" / "vllm_metrics_sample.txt").read_text()
PREFIX_LINE = re.compile(r"^(vllm:prefix_cache_(hits|queries)_total\{[^}]*\}) [0-9.e+]+$", re.M)


class LiveVLLM:
    """The vLLM fixture with its prefix-cache counters growing: 50 hits per 100 queried tokens per scrape."""

    def __init__(self) -> None:
        self.scrapes = 0

    def __call__(self) -> bytes:
        self.scrapes += 1
        step = {"hits": 50, "queries": 100}
        return PREFIX_LINE.sub(lambda m: f"{m.group(1)} {float(self.scrapes * step[m.group(2)])}", VLLM).encode()


@pytest.fixture
def engines():
    server = EngineServer()
    server.add("/live", LiveVLLM())
    yield server
    server.stop()


@pytest.fixture
def collector(engines):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "infersight", "collect", "engine", "--listen", f"127.0.0.1:{port}",
         "--target", f"vllm={engines.url('/live')}", "--target", "sglang=http://127.0.0.1:1/metrics"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", timeout=20)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_prometheus_computes_prefix_cache_hit_rate_from_our_counters(engines, collector, prometheus_server):
    require_tool("prometheus")
    prom = prometheus_server([f"127.0.0.1:{collector}"])
    hits, queries = sig.PREFIX_CACHE_HITS, sig.PREFIX_CACHE_QUERIES
    # The recording-rule shape: a ratio of rates, token-weighted, per target.
    hit_rate = f"sum by (target) ({hits.rate('30s')}) / sum by (target) ({queries.rate('30s')})"
    deadline = time.monotonic() + 30
    value = math.nan
    while time.monotonic() < deadline:
        result = prom.query(hit_rate)
        if result and not math.isnan(float(result[0]["value"][1])):
            value = float(result[0]["value"][1])
            break
        time.sleep(0.5)
    assert value == pytest.approx(0.5), prom.log()[-2000:]

    up = {r["metric"]["target"]: r["value"][1] for r in prom.wait_for(sig.UP.select())}
    assert up == {f"127.0.0.1:{engines.port}/live": "1", "127.0.0.1:1": "0"}
    # The failed target has no series, only its `up` and error counter.
    assert prom.query(sig.KV_CACHE_USAGE.select(target="127.0.0.1:1")) == []
    errors = prom.wait_for(sig.SCRAPE_ERRORS.select(target="127.0.0.1:1"))
    assert errors[0]["metric"]["reason"] == "down"
    p95 = prom.wait_for(sig.TTFT.quantile(0.95, ["model"], window="1m"))
    assert p95[0]["metric"]["model"] == "Qwen/Qwen3-8B"


"""A real Prometheus scrapes `infersight collect engine` (the real command, in its own process)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from infersight.collectors.exporter import serve
from infersight.signals import engine as sig
from infersight.signals import gpu
from tests.collectors.engine_server import EngineServer
from tests.conftest import FIXTURES, free_port, require_tool, wait_http

VLLM = (FIXTURES / "metrics" / "vllm_metrics_sample.txt").read_text()
PREFIX_LINE = re.compile(r"^(vllm:prefix_cache_(hits|queries)_total\{[^}]*\}) [0-9.e+]+$", re.M)
GENERATION_LINE = re.compile(r"^(vllm:generation_tokens_total\{[^}]*\}) [0-9.e+]+$", re.M)
TOKENS_PER_SECOND = 100.0
WATTS_PER_GPU = 300.0


class LiveVLLM:
    """The vLLM fixture with growing counters: 50 prefix-cache hits per 100 queried tokens per scrape,
    and 100 generated tokens per second."""

    def __init__(self) -> None:
        self.scrapes = 0
        self.start = time.monotonic()

    def __call__(self) -> bytes:
        self.scrapes += 1
        step = {"hits": 50, "queries": 100}
        text = PREFIX_LINE.sub(lambda m: f"{m.group(1)} {float(self.scrapes * step[m.group(2)])}", VLLM)
        tokens = TOKENS_PER_SECOND * (time.monotonic() - self.start)
        return GENERATION_LINE.sub(lambda m: f"{m.group(1)} {tokens}", text).encode()


class StandInGPUs(Collector):
    """Stand-in for the GPU collector on node n1 (no GPU here): two devices drawing 300 W each,
    exposed under the catalog's own name and device labels."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def collect(self):
        family = gpu.ENERGY.family()
        joules = WATTS_PER_GPU * (time.monotonic() - self.start)
        for index in ("0", "1"):
            family.add_metric(["n1", index, f"GPU-{index}", "H100-SXM"], joules)
        yield family


@pytest.fixture
def engines():
    server = EngineServer()
    server.add("/live", LiveVLLM())
    yield server
    server.stop()


@pytest.fixture
def gpus():
    registry = CollectorRegistry()
    registry.register(StandInGPUs())
    server, _thread = serve(registry, "127.0.0.1:0")
    yield server.server_port
    server.shutdown()


@pytest.fixture
def collector(engines, tmp_path):
    port = free_port()
    config = tmp_path / "infersight.yaml"
    target = f"{{url: '{engines.url('/live')}', engine: vllm, node: n1, gpu: '0,1'}}"
    config.write_text(f"engines:\n  targets:\n    - {target}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "infersight", "--config", str(config), "collect", "engine",
         "--listen", f"127.0.0.1:{port}", "--target", "sglang=http://127.0.0.1:1/metrics"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", timeout=20)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_prometheus_computes_hit_rate_and_energy_per_token(engines, collector, gpus, prometheus_server):
    require_tool("prometheus")
    prom = prometheus_server([f"127.0.0.1:{collector}", f"127.0.0.1:{gpus}"])
    hits, queries = sig.PREFIX_CACHE_HITS, sig.PREFIX_CACHE_QUERIES
    # The recording-rule shape: a ratio of rates, token-weighted, per target.
    hit_rate = f"sum by (target) ({hits.rate('30s')}) / sum by (target) ({queries.rate('30s')})"
    assert first_number(prom, hit_rate) == pytest.approx(0.5), prom.log()[-2000:]
    # Energy per generated token, joined on `node` with the GPU collector's series. irate, not
    # rate: the two series start seconds apart, and rate()'s extrapolation over a window longer
    # than a young series would skew the ratio; the slopes themselves are exact.
    energy = f"sum by (node) (irate({gpu.ENERGY.select(node='n1')}[10s]))"
    tokens = f"sum by (node) (irate({sig.GENERATION_TOKENS.select(node='n1')}[10s]))"
    joules_per_token = 2 * WATTS_PER_GPU / TOKENS_PER_SECOND
    assert first_number(prom, f"{energy} / {tokens}") == pytest.approx(joules_per_token, rel=0.1)
    # Per engine target, through the GPU list it runs on (llm_engine_gpu_info on the "many" side,
    # so GPUs shared by several targets still join).
    target_energy = (f"sum by (target) ({sig.GPU_INFO.select()} * on (node, gpu) group_left "
                     f"irate({gpu.ENERGY.select()}[10s]))")
    target_tokens = f"sum by (target) (irate({sig.GENERATION_TOKENS.select()}[10s]))"
    assert first_number(prom, f"{target_energy} / {target_tokens}") == pytest.approx(joules_per_token, rel=0.1)

    up = {r["metric"]["target"]: r["value"][1] for r in prom.wait_for(sig.UP.select())}
    assert up == {f"127.0.0.1:{engines.port}/live": "1", "127.0.0.1:1": "0"}
    running = prom.wait_for(sig.REQUESTS_RUNNING.select())[0]["metric"]
    assert (running["engine"], running["node"], running["gpu"], running["dp_rank"]) == ("vllm", "n1", "0,1", "0")
    # The failed target has no series, only its `up` and error counter.
    assert prom.query(sig.KV_CACHE_USAGE.select(target="127.0.0.1:1")) == []
    errors = prom.wait_for(sig.SCRAPE_ERRORS.select(target="127.0.0.1:1"))
    assert errors[0]["metric"]["reason"] == "down"
    p95 = prom.wait_for(sig.TTFT.quantile(0.95, ["model"], window="1m"))
    assert p95[0]["metric"]["model"] == "Qwen/Qwen3-8B"



def first_number(prom, promql: str, timeout: float = 30.0) -> float:
    """The query's first value once it is a number (rates need two scrapes first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = prom.query(promql)
        if result and not math.isnan(float(result[0]["value"][1])):
            return float(result[0]["value"][1])
        time.sleep(0.5)
    raise AssertionError(f"no number for {promql} after {timeout}s")

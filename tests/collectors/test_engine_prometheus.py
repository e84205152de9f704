"""A real Prometheus scrapes `infersight collect engine` (the real command, in its own process)."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from infersight.collectors.gpu.app import GPUExporter
from infersight.collectors.gpu.sim import SimBackend
from infersight.signals import engine as sig
from infersight.signals import gpu
from tests.collectors.engine_server import EngineServer, LiveVLLM
from tests.conftest import free_port, require_tool, wait_http

TOKENS_PER_SECOND = 100.0


@pytest.fixture
def engines():
    server = EngineServer()
    server.add("/live", LiveVLLM(TOKENS_PER_SECOND))
    yield server
    server.stop()


@pytest.fixture
def gpus():
    """The real GPU exporter on node n1, over two simulated GPUs under a steady load."""
    sim = SimBackend(2, "H100-SXM", node="n1")
    sim.set_all_loads(compute=0.5, bandwidth=0.7)
    exporter = GPUExporter(sim, "n1", interval_seconds=0.05)
    port = exporter.start("127.0.0.1:0")
    yield port, sim
    exporter.stop()


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
    gpu_port, sim = gpus
    prom = prometheus_server([f"127.0.0.1:{collector}", f"127.0.0.1:{gpu_port}"])
    hits, queries = sig.PREFIX_CACHE_HITS, sig.PREFIX_CACHE_QUERIES
    # The recording-rule shape: a ratio of rates, token-weighted, per target.
    hit_rate = f"sum by (instance) ({hits.rate('30s')}) / sum by (instance) ({queries.rate('30s')})"
    assert first_number(prom, hit_rate) == pytest.approx(0.5), prom.log()[-2000:]
    # Energy per generated token, joined on `node` with the GPU collector's series. Wait until both
    # counters are well older than the 5s window: rate() extrapolates a series younger than its
    # window differently for each counter, and the collector's first, slower scrapes are stamped
    # earlier than they read; either would skew the ratio.
    for counter in (gpu.ENERGY.select(node="n1"), sig.GENERATION_TOKENS.select(node="n1")):
        prom.wait_for(f"count_over_time({counter}[15s]) >= 13", timeout=40)
    energy = f"sum by (node) (rate({gpu.ENERGY.select(node='n1')}[5s]))"
    tokens = f"sum by (node) (rate({sig.GENERATION_TOKENS.select(node='n1')}[5s]))"
    watts = sum(sim.gpu(index).read().power_watts for index in (0, 1))  # steady load: steady power
    joules_per_token = watts / TOKENS_PER_SECOND
    assert first_number(prom, f"{energy} / {tokens}") == pytest.approx(joules_per_token, rel=0.1)
    # Per engine target, through the GPU list it runs on (llm_engine_gpu_info on the "many" side,
    # so GPUs shared by several targets still join).
    target_energy = (f"sum by (instance) ({sig.GPU_INFO.select()} * on (node, gpu) group_left "
                     f"rate({gpu.ENERGY.select()}[5s]))")
    target_tokens = f"sum by (instance) (rate({sig.GENERATION_TOKENS.select()}[5s]))"
    assert first_number(prom, f"{target_energy} / {target_tokens}") == pytest.approx(joules_per_token, rel=0.1)

    up = {r["metric"]["instance"]: r["value"][1] for r in prom.wait_for(sig.UP.select())}
    assert up == {f"127.0.0.1:{engines.port}/live": "1", "127.0.0.1:1": "0"}
    running = prom.wait_for(sig.REQUESTS_RUNNING.select())[0]["metric"]
    assert (running["engine"], running["node"], running["gpu"], running["dp_rank"]) == ("vllm", "n1", "0,1", "0")
    # The failed target has no series, only its `up` and error counter.
    assert prom.query(sig.KV_CACHE_USAGE.select(instance="127.0.0.1:1")) == []
    errors = prom.wait_for(sig.SCRAPE_ERRORS.select(instance="127.0.0.1:1"))
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


def test_prefill_decode_ratio_in_promql(tmp_path, prometheus_server):
    """A PD fleet: two SGLang prefill servers (engine_type=prefill) and one decode server whose role
    comes from the target config; Prometheus answers the P:D questions from the `role` label."""
    require_tool("prometheus")
    from tests.collectors.test_engine_normalize import fixture

    prefill = fixture("sglang_pd_current_source.txt")
    decode = prefill.replace('engine_type="prefill"', 'engine_type="unified"')
    server = EngineServer()
    server.add("/p1", prefill)
    server.add("/p2", prefill)
    server.add("/d1", decode)
    port = free_port()
    config = tmp_path / "infersight.yaml"
    config.write_text("engines:\n  targets:\n" + "".join(
        f"    - {{url: '{server.url('/' + name)}', instance: '{name}:30000'{extra}}}\n"
        for name, extra in (("p1", ""), ("p2", ""), ("d1", ", role: decode"))))
    proc = subprocess.Popen([sys.executable, "-m", "infersight", "--config", str(config), "collect", "engine",
                             "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", timeout=20)
        prom = prometheus_server([f"127.0.0.1:{port}"])
        waiting = sig.REQUESTS_WAITING
        per_role = prom.wait_for(f"count by (role) (count by (role, instance) ({waiting.select()}))")
        assert {r["metric"]["role"]: r["value"][1] for r in per_role} == {"prefill": "2", "decode": "1"}
        ratio = (f"count by (model) (count by (model, instance) ({waiting.select(role='prefill')})) / "
                 f"count by (model) (count by (model, instance) ({waiting.select(role='decode')}))")
        assert first_number(prom, ratio) == 2.0
        queue = prom.wait_for(f"sum by (role, stage) ({sig.KV_TRANSFER_QUEUE.select(stage='prefill_bootstrap')})")
        assert {r["metric"]["role"]: r["value"][1] for r in queue} == {"prefill": "10", "decode": "5"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.stop()

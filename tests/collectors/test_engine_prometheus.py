"""A real Prometheus scrapes `infersight collect engine` (the real command, in its own process) and the GPU exporter."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from infersight.collectors.gpu.app import GPUExporter
from infersight.collectors.gpu.promql import energy_per_token
from infersight.collectors.gpu.sim import SimBackend
from infersight.signals import engine as sig
from infersight.signals import gpu
from tests.collectors.engine_server import EngineServer, LiveVLLM
from tests.conftest import free_port, require_tool, wait_http

# Two nodes, so one Prometheus run answers both joins: n1 runs one engine on both of its GPUs
# (tensor parallel, gpu="0,1"), n2 one engine on GPU 0 of two (GPU 1 idle).
TOKENS_PER_SECOND = {"n1": 100.0, "n2": 2000.0}


@pytest.fixture
def engines():
    server = EngineServer()
    server.add("/live", LiveVLLM(TOKENS_PER_SECOND["n1"]))
    server.add("/vllm", LiveVLLM(TOKENS_PER_SECOND["n2"]))
    yield server
    server.stop()


@pytest.fixture
def gpus():
    """The real GPU exporter on each node, over two simulated H100s each, under a steady load."""
    n1 = SimBackend(2, "H100-SXM", node="n1")
    n1.set_all_loads(compute=0.5, bandwidth=0.7)
    n2 = SimBackend(2, "H100-SXM", node="n2")
    n2.set_load(0, compute=0.3, bandwidth=0.85)
    exporters = [GPUExporter(n1, "n1", interval_seconds=0.05), GPUExporter(n2, "n2", interval_seconds=0.25)]
    ports = [exporter.start("127.0.0.1:0") for exporter in exporters]
    yield ports, {"n1": n1, "n2": n2}
    for exporter in exporters:
        exporter.stop()


@pytest.fixture
def collector(engines, tmp_path):
    port = free_port()
    config = tmp_path / "infersight.yaml"
    config.write_text("engines:\n  targets:\n"
                      f"    - {{url: '{engines.url('/live')}', engine: vllm, node: n1, gpu: '0,1'}}\n"
                      f"    - {{url: '{engines.url('/vllm')}', engine: vllm, node: n2, gpu: '0'}}\n")
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


@pytest.mark.real
def test_prometheus_joins_gpu_and_engine_series(engines, collector, gpus, prometheus_server):
    """The real engine collector (its own process) and the real GPU exporter, scraped by a real Prometheus:
    bandwidth, prefix-cache hit rate and energy per generated token (the collectors' PromQL helper)."""
    require_tool("prometheus")
    gpu_ports, sims = gpus
    prom = prometheus_server([f"127.0.0.1:{collector}", *(f"127.0.0.1:{port}" for port in gpu_ports)])

    bandwidth = prom.wait_for(gpu.MEMORY_BANDWIDTH_UTILIZATION.select(source="gpm", node="n2", gpu="0"))
    assert float(bandwidth[0]["value"][1]) == pytest.approx(0.85)
    assert bandwidth[0]["metric"]["gpu_model"] == "H100-SXM"
    assert len(prom.query(gpu.UP.select(node="n2"))) == 2

    hits, queries = sig.PREFIX_CACHE_HITS, sig.PREFIX_CACHE_QUERIES
    # The recording-rule shape: a ratio of rates, token-weighted, per target.
    hit_rate = f"sum by (instance) ({hits.rate('30s')}) / sum by (instance) ({queries.rate('30s')})"
    assert first_number(prom, hit_rate) == pytest.approx(0.5), prom.log()[-2000:]

    # Wait until every counter is well older than the 5s window: rate() extrapolates a series
    # younger than its window differently for each counter, and the collector's first, slower
    # scrapes are stamped earlier than they read; either would skew the ratio.
    for node in ("n1", "n2"):
        for counter in (gpu.ENERGY.select(node=node), sig.GENERATION_TOKENS.select(node=node)):
            prom.wait_for(f"count_over_time({counter}[15s]) >= 13", timeout=40)
    watts = {node: [sims[node].gpu(index).read().power_watts for index in (0, 1)] for node in sims}  # steady

    # n1: per node, both GPUs against the one engine spanning them. The tolerance: Prometheus stamps a
    # sample when its scrape starts, and on a loaded machine the reading comes up to a few hundred ms
    # later, so each of the two 5s rates can be some 10% off (CI once read 9.94 for 8.58). A wrong join
    # is off by a factor of 2 or more (one GPU of the two, or another node's), far outside 25%.
    n1_joules_per_token = sum(watts["n1"]) / TOKENS_PER_SECOND["n1"]
    per_node = energy_per_token(window="5s", by=("node",), node="n1")
    assert first_number(prom, per_node) == pytest.approx(n1_joules_per_token, rel=0.25)
    # Per engine target, through the GPU list it runs on (llm_engine_gpu_info on the "many" side,
    # so GPUs shared by several targets still join).
    n1_instance = f"127.0.0.1:{engines.port}/live"
    target_energy = (f"sum by (instance) ({sig.GPU_INFO.select(instance=n1_instance)} * on (node, gpu) group_left "
                     f"rate({gpu.ENERGY.select()}[5s]))")
    target_tokens = f"sum by (instance) (rate({sig.GENERATION_TOKENS.select(instance=n1_instance)}[5s]))"
    assert first_number(prom, f"{target_energy} / {target_tokens}") == pytest.approx(n1_joules_per_token, rel=0.25)

    # n2: per GPU only GPU 0 joins (GPU 1 runs no engine; n1's engine is labelled gpu="0,1");
    # per node both of n2's GPUs count against its engine's tokens.
    per_gpu = prom.wait_for(energy_per_token(window="5s"), timeout=30)
    assert [(r["metric"]["node"], r["metric"]["gpu"]) for r in per_gpu] == [("n2", "0")]
    assert float(per_gpu[0]["value"][1]) == pytest.approx(watts["n2"][0] / TOKENS_PER_SECOND["n2"], rel=0.3)
    n2_node = prom.query(energy_per_token(window="5s", by=("node",), node="n2"))
    assert float(n2_node[0]["value"][1]) == pytest.approx(sum(watts["n2"]) / TOKENS_PER_SECOND["n2"], rel=0.3)

    up = {r["metric"]["instance"]: r["value"][1] for r in prom.wait_for(sig.UP.select())}
    assert up == {n1_instance: "1", f"127.0.0.1:{engines.port}/vllm": "1", "127.0.0.1:1": "0"}
    running = prom.wait_for(sig.REQUESTS_RUNNING.select(node="n1"))[0]["metric"]
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

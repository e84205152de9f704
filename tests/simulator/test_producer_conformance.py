"""Virtual time writes what the real producers expose: same series, created at the same moment.

The simulator keeps the gateway's request metrics aggregated (``simulator/gateway_metrics.py``) and
hands its engines' vLLM families to the engine collector's mapper without the text. These tests run
the same traffic through the real code (the request tracer; vLLM text parsed by the collector) and
compare every exposed series and every count.
"""

from __future__ import annotations

import random
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from infersight.capacity import GPU_PRESETS
from infersight.collectors.engine.normalize import TargetLabels, normalize, normalize_families
from infersight.config import Config
from infersight.instrumentation import RequestTracer, TailSampler
from infersight.signals import request
from infersight.simulator import vllm_format
from infersight.simulator.engine import SimEngine
from infersight.simulator.gateway_metrics import GatewayMetrics
from infersight.simulator.physics import Physics
from infersight.simulator.request import SimRequest
from infersight.simulator.workload import Draw

REAL_VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "vllm_0_32_cpu_real.txt"
TIMELINES = request.TIMELINES_KEPT.name  # its slow_*/random reasons come from the sampler's p99


def _series(registry: CollectorRegistry) -> dict[tuple, float]:
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if not s.name.endswith("_created") and s.name != TIMELINES:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# (outcome, queued, gateway retries, tokens)
STORY = [("success", False, 0, 40), ("success", True, 0, 12), ("rejected", True, 0, 0), ("timeout", False, 0, 0),
         ("error", False, 1, 0), ("success", False, 1, 7), ("timeout", True, 0, 5)]


def _through_simulator() -> dict[tuple, float]:
    gm = GatewayMetrics(seed=1)
    for i, (outcome, queued, retries, tokens) in enumerate(STORY):
        req = SimRequest(i, "m1", "stable", "least_conn", Draw(100, max(tokens, 1), f"u{i}", 0), 0.0, 0, 60.0)
        gm.started(req)
        if queued:
            req.queued_at = 0.0
            gm.queued(req)
        if outcome != "rejected":
            gm.routed(req, "h1:8000", 0.1)
            for _ in range(retries):
                gm.retried(req)
                gm.routed(req, "h2:8000", 0.2)
        kind = ("ttft" if not tokens else "total") if outcome == "timeout" else None
        gm.ended(req, outcome, 1.0, ttft_s=0.5 if tokens else None, tokens=tokens, gap_s=0.01, timeout_kind=kind,
                 rejection_reason="queue_full" if outcome == "rejected" else None)
    return _series(gm.registry)


def _through_tracer() -> dict[tuple, float]:
    registry = CollectorRegistry()
    tracer = RequestTracer(registry=registry, sampler=TailSampler(random_share=0.0))
    for outcome, queued, retries, tokens in STORY:
        req = tracer.start("m1", pool="stable", strategy="least_conn")
        if queued:
            req.queued()
        if outcome == "rejected":
            req.reject("queue_full")
            continue
        req.routed("h1:8000")
        for _ in range(retries):
            req.retry()
            req.routed("h2:8000")
        if tokens:
            req.tokens(tokens)
        if outcome == "success":
            req.finish("stop", input_tokens=100, output_tokens=tokens, cached_input_tokens=0)
        elif outcome == "timeout":
            req.timeout("total" if tokens else "ttft")
        else:
            req.fail("upstream_error")
    return _series(registry)


def test_gateway_series_are_the_tracers_series():
    simulated, real = _through_simulator(), _through_tracer()
    assert sorted(simulated) == sorted(real)
    counts = [k for k in real if k[0].endswith(("_count", "_total")) or k[0] == "llm_requests_in_flight"]
    assert counts and {k: simulated[k] for k in counts} == {k: real[k] for k in counts}


def test_engine_series_are_what_the_collector_makes_of_vllm_text():
    physics = Physics.build(Config().capacity.model, GPU_PRESETS["H100-SXM"])
    engine = SimEngine("sim-n01:8003", "gemma-27b-int4", "canary", "sim-n01", 3, physics)
    engine.start(0.0, cold=True)
    rng = random.Random(3)
    for i in range(40):
        draw = Draw(rng.randint(200, 3000), rng.randint(5, 200), f"p{i % 3}", 512)
        engine.submit(SimRequest(i, engine.model, "canary", "least_conn", draw, i * 0.1, 0, 1e9), i * 0.1)
    for t in range(30):
        engine.advance(float(t), float(t + 1))
    labels = TargetLabels("sim-n01:8003", "canary", "sim-n01", "3")
    from_text = normalize(vllm_format.exposition(engine), labels, "vllm")
    in_memory = normalize_families(vllm_format.families(engine), labels, "vllm")

    def flat(n):
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for samples in n.samples.values() for s in samples}

    assert flat(in_memory) == flat(from_text)
    assert engine.stats.finished["stop"] > 0 and engine.stats.prefix_hits > 0  # the engine did serve and hit


def _shapes(text: str) -> dict[str, tuple[str, set[tuple[str, tuple[str, ...]]], set[str]]]:
    """family -> (type, {(sample name, label names)}, histogram bounds), as a scraper parses them."""
    out = {}
    for family in text_string_to_metric_families(text):
        names = {(s.name, tuple(sorted(k for k in s.labels if k != "le"))) for s in family.samples
                 if not s.name.endswith("_created")}
        out[family.name] = (family.type, names, {s.labels["le"] for s in family.samples if "le" in s.labels})
    return out


def test_simulated_vllm_exposes_what_a_real_vllm_exposes():
    """Every family the simulated engine serves is in a real vLLM's /metrics, with its type, labels
    and buckets (the real capture carries more info labels: the simulator's must be among them)."""
    physics = Physics.build(Config().capacity.model, GPU_PRESETS["H100-SXM"])
    engine = SimEngine("sim-n01:8000", "gemma-27b-int4", "stable", "sim-n01", 0, physics)
    engine.start(0.0, cold=True)
    simulated = _shapes(vllm_format.exposition(engine))
    real = _shapes(REAL_VLLM.read_text())
    assert simulated.keys() <= real.keys(), sorted(simulated.keys() - real.keys())
    for family, (kind, names, bounds) in simulated.items():
        real_kind, real_names, real_bounds = real[family]
        assert (kind, bounds) == (real_kind, real_bounds), family
        if family.endswith("_info"):
            (_, labels), = names
            (_, real_labels), = real_names
            assert set(labels) <= set(real_labels), (family, sorted(set(labels) - set(real_labels)))
        else:
            assert names == real_names, family

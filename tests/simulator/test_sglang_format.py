"""Simulated SGLang engines serve what SGLang serves, and the real engine collector reads them as it
reads SGLang: the same families, types and label names as the fixture written from SGLang's source
(``tests/fixtures/metrics/sglang_pd_current_source.txt``), the same normalized signals and label
sets, and series that appear at their first event (SGLang creates none at 0)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from infersight.capacity import GPU_PRESETS
from infersight.collectors.engine.normalize import TargetLabels, normalize, normalize_families
from infersight.config import Config
from infersight.signals import engine as sig
from infersight.simulator import formats, sglang_format
from infersight.simulator.engine import SimEngine
from infersight.simulator.physics import Physics
from infersight.simulator.request import SimRequest
from infersight.simulator.workload import Draw

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
CURRENT = FIXTURES / "sglang_pd_current_source.txt"  # current names and labels (a PD prefill server)
REAL_SAMPLE = FIXTURES / "sglang_metrics_sample.txt"  # a real, older SGLang's /metrics
# Families SGLang's metrics_collector.py declares that neither fixture shows (an older release named
# the token-gap histogram time_per_output_token_seconds).
FROM_SOURCE_ONLY = {"sglang:max_total_num_tokens", "sglang:queue_time_seconds", "sglang:inter_token_latency_seconds",
                    "sglang:num_requests"}
# Signals only a disaggregated prefill server has (its KV transfer stage), and the ones the fixture leaves out.
PD_ONLY = {sig.KV_TRANSFER_DURATION}
NOT_IN_FIXTURE = {sig.INTER_TOKEN, sig.E2E, sig.QUEUE_TIME}
LABELS = TargetLabels("sim-n01:8001", "stable", "sim-n01", "1")


def _engine(kv_tokens: int = 20000) -> SimEngine:
    physics = dataclasses.replace(Physics.build(Config().capacity.model, GPU_PRESETS["H100-SXM"]),
                                  kv_capacity_tokens=kv_tokens)
    engine = SimEngine("sim-n01:8001", "gemma-27b-int4", "stable", "sim-n01", 1, physics, kind="sglang",
                       bounds=formats.bounds("sglang"))
    engine.start(0.0, cold=False)
    return engine


def _served() -> SimEngine:
    """An engine after traffic that retracts, hits its prefix cache and has one abort.

    Retraction needs a cache that really fills: the prompts admitted fill its 20000 tokens, and their
    outputs (up to 2000 tokens) grow the running batch past it faster than finished requests free
    room (with outputs up to 800 the batch peaked at 97% and nothing was retracted)."""
    engine = _engine()
    rng = random.Random(3)
    requests = []
    for i in range(40):
        draw = Draw(rng.randint(200, 1500), rng.randint(50, 2000), f"p{i % 3}", 512)
        requests.append(SimRequest(i, engine.model, "stable", "least_conn", draw, i * 0.1, 0, 1e9))
        engine.submit(requests[-1], i * 0.1)
    engine.abort(requests[-1])
    for t in range(60):
        engine.advance(float(t), float(t + 1))
    s = engine.stats
    assert s.preemptions and s.prefix_hits and s.finished["abort"] and s.finished["stop"]
    return engine


def _shapes(text: str) -> dict[str, tuple[str, set[tuple[str, tuple[str, ...]]]]]:
    out = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = (family.type, {(s.name, tuple(sorted(k for k in s.labels if k != "le")))
                                          for s in family.samples if not s.name.endswith("_created")})
    return out


def _signals(text: str) -> dict[sig.Signal, set[tuple[str, tuple[str, ...]]]]:
    normalized = normalize(text, LABELS, "sglang")
    return {signal: {(s.name, tuple(sorted(s.labels))) for s in samples}
            for signal, samples in normalized.samples.items()}


def test_simulated_sglang_families_are_sglangs():
    simulated = _shapes(sglang_format.exposition(_served()))
    current, older = _shapes(CURRENT.read_text()), _shapes(REAL_SAMPLE.read_text())
    assert simulated.keys() <= current.keys() | older.keys() | FROM_SOURCE_ONLY, sorted(
        simulated.keys() - current.keys() - older.keys() - FROM_SOURCE_ONLY)
    in_current = simulated.keys() & current.keys()
    assert len(in_current) >= 15, sorted(in_current)
    for family in in_current:
        assert simulated[family] == current[family], family  # type, sample names and label names
    for family in simulated.keys() & older.keys() - current.keys():
        assert simulated[family][0] == older[family][0], family


def test_the_collector_reads_simulated_sglang_as_it_reads_the_fixture():
    simulated, fixture = _signals(sglang_format.exposition(_served())), _signals(CURRENT.read_text())
    assert fixture.keys() - simulated.keys() == PD_ONLY
    assert simulated.keys() - fixture.keys() == NOT_IN_FIXTURE
    for signal in fixture.keys() & simulated.keys():
        assert simulated[signal] == fixture[signal], signal.name
    normalized = normalize(sglang_format.exposition(_served()), LABELS, "sglang")
    engines = {s.labels["engine"] for samples in normalized.samples.values() for s in samples}
    roles = {s.labels["role"] for samples in normalized.samples.values() for s in samples}
    assert (engines, roles) == ({"sglang"}, {sig.EngineRole.MIXED.value})  # a unified SGLang server
    stages = {s.labels["stage"] for s in normalized.samples[sig.KV_TRANSFER_QUEUE]}
    assert stages == {"prefill_bootstrap", "prefill_inflight", "decode_prealloc", "decode_transfer"}


def test_in_memory_families_are_what_the_collector_makes_of_the_text():
    engine = _served()
    from_text = normalize(sglang_format.exposition(engine), LABELS, "sglang")
    in_memory = normalize_families(sglang_format.families(engine), LABELS, "sglang")

    def flat(n):
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for samples in n.samples.values() for s in samples}

    assert flat(in_memory) == flat(from_text)


def test_series_appear_at_their_first_event_as_sglang_creates_them():
    engine = _engine()
    assert set(sglang_format.families(engine)) == {"sglang:cache_config_info"}  # emitted at start-up only
    draw = Draw(800, 50, "p0", 512)
    engine.submit(SimRequest(1, engine.model, "stable", "least_conn", draw, 0.0, 0, 1e9), 0.0)
    engine.advance(0.0, 0.1)  # admitted and prefilling: the scheduler logged a batch
    logged = sglang_format.families(engine)
    assert "sglang:num_running_reqs" in logged and "sglang:num_decode_transfer_queue_reqs" in logged
    assert not logged.keys() & {"sglang:prompt_tokens", "sglang:cached_tokens", "sglang:num_retracted_requests",
                                "sglang:num_aborted_requests", "sglang:e2e_request_latency_seconds"}
    for t in range(1, 30):
        engine.advance(t * 0.1, (t + 1) * 0.1)
    assert engine.stats.finished["stop"] == 1
    done = sglang_format.families(engine)
    assert done["sglang:prompt_tokens"][0].value == 800 and done["sglang:generation_tokens"][0].value == 50
    assert "sglang:cached_tokens" not in done  # its first request hit nothing: no series yet
    engine.start(10.0)  # a new process starts over
    assert set(sglang_format.families(engine)) == {"sglang:cache_config_info"}

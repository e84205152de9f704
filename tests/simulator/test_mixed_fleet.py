"""A mixed vLLM/SGLang fleet goes through the real engine collector into one vocabulary, and the
alerts read both engines' series (``mixed-engine-kv-pressure``; the alert-quality test checks that
LLMKVCacheNearFull fires in time, this file checks that only SGLang's series can have fired it).

Reads the scenario's one recorded run (``tests/simulator/runs.py``), no second simulation.
"""

from __future__ import annotations

from infersight.collectors.engine.engines import SGLANG, VLLM
from infersight.config import Config
from infersight.signals import engine as sig
from tests.simulator.runs import SCENARIOS, recorded

NAME = "mixed-engine-kv-pressure"


def _by_engine(name: str) -> dict[str, list[tuple[dict[str, str], list[float | None]]]]:
    out: dict[str, list] = {}
    for (series, labels), values in recorded(NAME).series.items():
        if series == name:
            labels = dict(labels)
            out.setdefault(labels["engine"], []).append((labels, values))
    return out


def test_both_engines_are_normalized_into_one_vocabulary():
    scenario = SCENARIOS[NAME]
    pools = {(p.name, p.engine) for m in scenario.fleet for p in m.pools}
    assert {engine for _pool, engine in pools} == {VLLM.name, SGLANG.name}
    for signal in (sig.KV_CACHE_USAGE, sig.REQUESTS_WAITING, sig.PREFIX_CACHE_HITS):
        by_engine = _by_engine(signal.name)
        assert by_engine.keys() == {VLLM.name, SGLANG.name}, signal.name
        for engine, series in by_engine.items():
            assert {(labels["pool"], engine) for labels, _ in series} <= pools
    ttft = _by_engine(sig.TTFT.name + "_bucket")
    bounds = {engine: {labels["le"] for labels, _ in series} for engine, series in ttft.items()}
    assert bounds[VLLM.name] != bounds[SGLANG.name]  # each engine's own buckets, side by side


def _longest_run(flags: list[bool]) -> int:
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def test_only_the_sglang_instances_hold_a_full_kv_cache_while_retracting():
    """LLMKVCacheNearFull's condition (KV usage over the line while the engine preempts, over 5-minute
    windows) holds for longer than its ``for: 5m`` only on SGLang instances: the alert the quality test
    sees firing can only come from SGLang's token_usage and retraction counter."""
    onset = int(SCENARIOS[NAME].onset_minute)
    line = Config().thresholds.kv_usage_near_full
    usage = {labels["instance"]: (engine, values) for engine, series in _by_engine(sig.KV_CACHE_USAGE.name).items()
             for labels, values in series}
    preempted = {labels["instance"]: values for series in _by_engine(sig.PREEMPTIONS.name).values()
                 for labels, values in series}
    runs: dict[str, int] = {}
    for instance, (engine, values) in usage.items():
        counter = [v or 0.0 for v in preempted.get(instance, [None] * len(values))]
        held = [values[m] is not None and values[m] > line and counter[m] > counter[m - 5]
                for m in range(onset, len(values))]
        runs[engine] = max(runs.get(engine, 0), _longest_run(held))
    assert runs[VLLM.name] <= 5 < runs[SGLANG.name], runs
    # SGLang creates its retraction counter at the first retraction: absent before the onset
    assert all(values[onset - 1] is None for _labels, values in _by_engine(sig.PREEMPTIONS.name)[SGLANG.name])

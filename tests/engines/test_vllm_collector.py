"""The engine collector against a real vLLM 0.32 (CPU build, tiny model): every mapped family is
present and equal to vLLM's own value, queues and KV usage under load, prefix-cache hits, and
``llm_engine_up 0`` once the engine is gone."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.collectors.engine.collector import EngineCollector
from infersight.collectors.engine.engines import VLLM
from infersight.collectors.engine.targets import Target
from infersight.signals import engine as sig
from infersight.signals.catalog import Kind
from tests.engines.vllm_server import CLIENT_TIMEOUT_S

SHARED_PREFIX = "You are a careful assistant who answers briefly and precisely. " * 8  # > 3 blocks of 32
LOAD_TOKENS = 96  # per request of the load test: four run while four wait, long enough to be seen
LOAD_ROUNDS = 4  # rounds of that load at most, until a scrape has seen the queue


def collect(collector: EngineCollector) -> dict[str, list]:
    """One cycle: signal name -> its samples (prometheus_client names counter families without _total)."""
    return {family.name + ("_total" if family.type == "counter" else ""): family.samples
            for family in collector.run_cycle().families}


def engine_families(text: str) -> dict[str, list]:
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(samples, name: str, **labels) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


async def chat(client, content: str, max_tokens: int, **kwargs):
    return await client.chat.completions.create(
        model="tiny-llama", messages=[{"role": "user", "content": content}], max_tokens=max_tokens,
        extra_body={"ignore_eos": True}, **kwargs)


@pytest.fixture
def collector(vllm):
    c = EngineCollector([Target(vllm.metrics_url, engine="auto")], timeout=10.0, log_changes=False)
    yield c
    c.close()


@pytest.fixture
def client(vllm):
    """A factory: an openai client belongs to one event loop, so each asyncio.run makes its own."""
    import openai

    return lambda: openai.AsyncOpenAI(base_url=vllm.base_url + "/v1", api_key="none", max_retries=0,
                                      timeout=CLIENT_TIMEOUT_S)


def wait_idle(collector: EngineCollector, timeout: float = 60.0) -> dict[str, list]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ours = collect(collector)
        running = [s.value for s in ours.get(sig.REQUESTS_RUNNING.name, [])]
        waiting = [s.value for s in ours.get(sig.REQUESTS_WAITING.name, [])]
        if running == [0.0] and waiting == [0.0]:
            return ours
        time.sleep(0.2)
    raise AssertionError("vLLM did not become idle")


def test_every_mapped_family_equals_vllms_own_value(vllm, collector, client):
    async def traffic():
        api = client()
        await asyncio.gather(*(chat(api, SHARED_PREFIX + f"question {i}", 8 + i) for i in range(3)))
    asyncio.run(traffic())
    ours = wait_idle(collector)
    raw = engine_families(vllm.metrics_text())  # idle now: nothing moves between the two reads
    ours = collect(collector)
    assert value(ours[sig.UP.name], sig.UP.name) == 1.0
    checked = []
    for rule in VLLM.rules:
        source = next((name for name in rule.sources if name in raw), None)
        if source is None or (rule.unless_family in raw) or (rule.requires and rule.requires not in raw):
            continue
        samples = [s for s in raw[source] if not s.name.endswith("_created") and rule.keeps(s.labels)]
        signal = rule.signal
        mine = ours.get(signal.name)
        assert mine, f"{signal.name} missing though vLLM exposes {source}"
        if signal.kind is Kind.HISTOGRAM:
            for suffix in ("_count", "_sum"):
                theirs = sum(s.value for s in samples if s.name == source + suffix)
                assert sum(s.value for s in mine if s.name == signal.name + suffix) == pytest.approx(theirs), \
                    (signal.name, suffix)
            theirs_buckets = {s.labels["le"]: s.value for s in samples if s.name.endswith("_bucket")}
            assert {s.labels["le"]: s.value for s in mine if s.name.endswith("_bucket")} == theirs_buckets
        else:
            relabel = dict(rule.relabel)
            for s in samples:
                match = {ours_label: s.labels[theirs] for theirs, ours_label in relabel.items()} | dict(rule.labels)
                got = [m.value for m in mine if all(m.labels.get(k) == v for k, v in match.items())]
                assert got == [s.value], (signal.name, s.labels, got)
        checked.append(signal.name)
    # Every family the issue lists for vLLM 0.32 is there and mapped.
    for signal in (sig.TPOT, sig.REQUESTS_WAITING_BY_REASON, sig.REJECTIONS, sig.PROMPT_CACHED_TOKENS,
                   sig.PROMPT_TOKENS_BY_SOURCE, sig.EXTERNAL_PREFIX_CACHE_QUERIES, sig.EXTERNAL_PREFIX_CACHE_HITS,
                   sig.ITERATION_TOKENS, sig.INTER_TOKEN, sig.TTFT, sig.E2E, sig.REQUESTS_FINISHED):
        assert signal.name in checked, signal.name
    assert value(ours[sig.SLEEP_LEVEL.name], sig.SLEEP_LEVEL.name) == sig.SleepLevel.AWAKE
    capacity = value(ours[sig.KV_CACHE_CAPACITY.name], sig.KV_CACHE_CAPACITY.name)
    assert capacity == 48 * 32  # --num-gpu-blocks-override 48, --block-size 32
    labels = ours[sig.REQUESTS_RUNNING.name][0].labels
    assert (labels["instance"], labels["engine"], labels["model"], labels["dp_rank"], labels["role"]) == (
        vllm.instance, "vllm", "tiny-llama", "0", "mixed")


def test_running_waiting_and_kv_usage_under_load(vllm, collector, client):
    """Eight long requests on an engine that runs four at a time: a queue forms and the KV cache fills."""
    seen = {"running": 0.0, "waiting": 0.0, "kv": 0.0}

    def queue_seen() -> bool:
        return seen["running"] == 4 and seen["waiting"] >= 1

    async def load():
        api = client()
        tasks = [asyncio.create_task(chat(api, SHARED_PREFIX + f"load {i} " * 20, LOAD_TOKENS)) for i in range(8)]
        while not all(t.done() for t in tasks):
            ours = await asyncio.to_thread(collect, collector)
            seen["running"] = max(seen["running"], value(ours[sig.REQUESTS_RUNNING.name], sig.REQUESTS_RUNNING.name))
            seen["waiting"] = max(seen["waiting"], value(ours[sig.REQUESTS_WAITING.name], sig.REQUESTS_WAITING.name))
            seen["kv"] = max(seen["kv"], value(ours[sig.KV_CACHE_USAGE.name], sig.KV_CACHE_USAGE.name))
            await asyncio.sleep(0.05)
        return [t.result() for t in tasks]

    # On a busy machine one scrape can outlast a whole round of the load (seen here: every scrape read
    # 0 running); the queue is there all the same, so another round gets another look at it.
    for _ in range(LOAD_ROUNDS):
        results = asyncio.run(load())
        assert all(r.usage.completion_tokens == LOAD_TOKENS for r in results)
        if queue_seen():
            break
    assert seen["running"] == 4  # --max-num-seqs 4
    assert seen["waiting"] >= 1
    assert 0 < seen["kv"] <= 1
    idle = wait_idle(collector)
    by_reason = {s.labels["reason"]: s.value for s in idle[sig.REQUESTS_WAITING_BY_REASON.name]}
    assert by_reason == {"capacity": 0.0, "deferred": 0.0}


def test_prefix_cache_hits_with_a_shared_prompt(vllm, collector, client):
    def totals():
        ours = collect(collector)
        return (value(ours[sig.PREFIX_CACHE_HITS.name], sig.PREFIX_CACHE_HITS.name),
                value(ours[sig.PREFIX_CACHE_QUERIES.name], sig.PREFIX_CACHE_QUERIES.name),
                value(ours[sig.PROMPT_CACHED_TOKENS.name], sig.PROMPT_CACHED_TOKENS.name, tier="device"))

    prompt = "A long shared document about inference engines and their caches. " * 12

    async def two_requests():
        api = client()
        await chat(api, prompt + "first", 2)
        before = await asyncio.to_thread(totals)
        second = await chat(api, prompt + "second", 2)
        return before, second, await asyncio.to_thread(totals)

    (hits0, queries0, device0), second, (hits1, queries1, device1) = asyncio.run(two_requests())
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 64  # whole 32-token blocks of the shared prefix
    assert hits1 - hits0 == cached
    assert queries1 - queries0 == second.usage.prompt_tokens
    assert device1 - device0 == cached  # the device tier held them


@pytest.mark.stops_engine
def test_a_stopped_engine_reads_up_0(vllm, collector):
    assert value(collect(collector)[sig.UP.name], sig.UP.name) == 1.0
    vllm.stop()
    families = collect(collector)
    assert value(families[sig.UP.name], sig.UP.name, instance=vllm.instance) == 0.0
    assert sig.REQUESTS_RUNNING.name not in families and sig.KV_CACHE_USAGE.name not in families
    errors = families[sig.SCRAPE_ERRORS.name]
    assert value(errors, sig.SCRAPE_ERRORS.name, instance=vllm.instance, reason="down") == 1.0

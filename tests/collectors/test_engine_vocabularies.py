"""Current engine vocabularies: vLLM 0.32 as captured from a real vLLM here, the others as written from
each engine's current source (provenance in tests/fixtures/README.md and each file's first lines)."""

from __future__ import annotations

import pytest

from infersight.collectors.engine.normalize import TargetLabels, normalize
from infersight.collectors.engine.targets import Target, TargetError, parse_file_sd
from infersight.signals import engine as sig
from tests.collectors.test_engine_normalize import engine_value, fixture, only, values

LABELS = TargetLabels("10.0.0.5:8000", pool="stable")


def test_vllm_0_32_real_exposition_maps_every_new_family():
    text = fixture("vllm_0_32_cpu_real.txt")
    result = normalize(text, LABELS)
    assert result.engine == "vllm"
    for reason in ("capacity", "deferred"):
        assert only(result, sig.REQUESTS_WAITING_BY_REASON, reason=reason) == engine_value(
            text, "vllm:num_requests_waiting_by_reason", reason=reason)
    for tier in ("device", "host", "p2p", "disk", "external_unspecified"):
        assert only(result, sig.PROMPT_CACHED_TOKENS, tier=tier) == engine_value(
            text, "vllm:prompt_tokens_cached_by_source_total", source=tier)
    assert only(result, sig.PROMPT_CACHED_TOKENS, tier="device") == 1792  # the 256-token shared prefix x 7
    assert not values(result, sig.PROMPT_CACHED_TOKENS, tier="all")  # the split wins over the total
    for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
        assert only(result, sig.PROMPT_TOKENS_BY_SOURCE, source=source) == engine_value(
            text, "vllm:prompt_tokens_by_source_total", source=source)
    assert only(result, sig.EXTERNAL_PREFIX_CACHE_QUERIES) == engine_value(
        text, "vllm:external_prefix_cache_queries_total")
    assert only(result, sig.EXTERNAL_PREFIX_CACHE_HITS) == 0
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        assert only(result, sig.REJECTIONS, reason=reason) == 0
    for reason in ("stop", "length", "abort", "error", "repetition"):
        assert only(result, sig.REQUESTS_FINISHED, finish_reason=reason) == engine_value(
            text, "vllm:request_success_total", finished_reason=reason)
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="length") == 9
    assert only(result, sig.SLEEP_LEVEL) == sig.SleepLevel.AWAKE
    assert only(result, sig.KV_CACHE_CAPACITY) == 48 * 32
    # Per-request TPOT and per-gap ITL are two signals now, each from its own vLLM histogram.
    tpot_count = [s.value for s in result.samples[sig.TPOT] if s.name.endswith("_count")]
    assert tpot_count == [engine_value(text, "vllm:request_time_per_output_token_seconds_count")]
    itl_count = [s.value for s in result.samples[sig.INTER_TOKEN] if s.name.endswith("_count")]
    assert itl_count == [engine_value(text, "vllm:inter_token_latency_seconds_count")]
    assert itl_count[0] > tpot_count[0]  # one observation per token gap vs one per request
    iteration = [s.value for s in result.samples[sig.ITERATION_TOKENS] if s.name.endswith("_sum")]
    assert iteration == [engine_value(text, "vllm:iteration_tokens_total_sum")]
    assert {s.labels["role"] for ss in result.samples.values() for s in ss} == {"mixed"}


def test_vllm_decode_instance_asleep_with_kv_transfers_and_rejections():
    text = fixture("vllm_0_32_pd_sleep_source.txt")
    result = normalize(text, LABELS)
    assert only(result, sig.SLEEP_LEVEL) == sig.SleepLevel.WEIGHTS_OFFLOADED
    asleep2 = text.replace('sleep_state="weights_offloaded"} 1.0', 'sleep_state="weights_offloaded"} 0.0').replace(
        'sleep_state="discard_all"} 0.0', 'sleep_state="discard_all"} 1.0')
    assert only(normalize(asleep2, LABELS), sig.SLEEP_LEVEL) == sig.SleepLevel.DISCARD_ALL
    assert {s.labels["stage"]: s.value for s in result.samples[sig.KV_TRANSFER_QUEUE]} == {
        "waiting_to_start": 1, "in_progress": 3, "completed_waiting": 1}
    assert only(result, sig.KV_TRANSFER_DURATION, le="0.05") == 90
    assert only(result, sig.REJECTIONS, reason="max_num_queued_reqs") == 12
    assert only(result, sig.REQUESTS_WAITING_BY_REASON, reason="deferred") == 5
    # vLLM's exposition does not name a P/D role (NIXL pairs run kv_both on both sides): the config does.
    assert {s.labels["role"] for ss in result.samples.values() for s in ss} == {"mixed"}
    decode = normalize(text, TargetLabels("10.0.0.6:8000", role="decode"))
    assert {s.labels["role"] for ss in decode.samples.values() for s in ss} == {"decode"}


def test_sglang_prefill_server_of_a_pd_deployment():
    text = fixture("sglang_pd_current_source.txt")
    result = normalize(text, LABELS)
    assert result.engine == "sglang"
    # engine_type=prefill names the role of every series, the tokenizer's (no engine_type) too.
    assert {s.labels["role"] for ss in result.samples.values() for s in ss} == {"prefill"}
    assert only(result, sig.REQUESTS_WAITING) == 17 and only(result, sig.REQUESTS_RUNNING) == 9
    assert {s.labels["stage"]: s.value for s in result.samples[sig.KV_TRANSFER_QUEUE]} == {
        "prefill_bootstrap": 5, "prefill_inflight": 3, "decode_prealloc": 0, "decode_transfer": 0}
    assert only(result, sig.KV_TRANSFER_DURATION, le="0.0162") == 70
    assert only(result, sig.STAGE_LATENCY, stage="prefill_bootstrap", le="0.0162") == 75
    assert only(result, sig.PREEMPTIONS) == 11  # retracted requests
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="abort") == 6
    assert only(result, sig.KV_CACHE_CAPACITY) == 12000 * 64  # page_size x num_pages
    assert {s.labels["tier"]: s.value for s in result.samples[sig.PROMPT_CACHED_TOKENS]} == {
        "device": 250000, "host": 40000, "storage_mooncake": 10000}
    assert only(result, sig.PREFIX_CACHE_HITS) == 300000  # all tiers
    assert only(result, sig.PREFIX_CACHE_QUERIES) == 1000000
    assert {s.labels["source"]: s.value for s in result.samples[sig.PROMPT_TOKENS_BY_SOURCE]} == {
        "local_compute": 700000, "local_cache_hit": 300000}


@pytest.mark.parametrize("engine_type, role", [("decode", "decode"), ("unified", "mixed"), ("other", "mixed")])
def test_sglang_engine_type_becomes_role(engine_type, role):
    text = fixture("sglang_pd_current_source.txt").replace('engine_type="prefill"', f'engine_type="{engine_type}"')
    result = normalize(text, LABELS)
    assert {s.labels["role"] for ss in result.samples.values() for s in ss} == {role}
    assert "engine_type" not in result.samples[sig.REQUESTS_RUNNING][0].labels
    # The target config overrides what the engine says.
    forced = normalize(text, TargetLabels("x:1", role="prefill"))
    assert {s.labels["role"] for ss in forced.samples.values() for s in ss} == {"prefill"}


def test_sglang_prefill_and_decode_series_stay_apart():
    prefill = normalize(fixture("sglang_pd_current_source.txt"), TargetLabels("p:30000"))
    decode = normalize(fixture("sglang_pd_current_source.txt").replace('"prefill"', '"decode"'),
                       TargetLabels("d:30000"))
    running = prefill.samples[sig.REQUESTS_RUNNING] + decode.samples[sig.REQUESTS_RUNNING]
    assert sorted(s.labels["role"] for s in running) == ["decode", "prefill"]


def test_trtllm_serve_current_collector():
    text = fixture("trtllm_serve_current_source.txt")
    result = normalize(text, LABELS)
    assert result.engine == "trtllm"
    assert only(result, sig.REQUESTS_RUNNING) == 14 and only(result, sig.REQUESTS_WAITING) == 6
    assert only(result, sig.KV_CACHE_USAGE) == 0.625
    assert only(result, sig.KV_CACHE_CAPACITY) == 4096 * 32
    assert only(result, sig.PROMPT_TOKENS) == 520000 and only(result, sig.GENERATION_TOKENS) == 98000
    assert only(result, sig.PREFIX_CACHE_HITS) == 310000 and only(result, sig.PREFIX_CACHE_QUERIES) == 520000
    assert only(result, sig.TPOT, le="0.025") == 400 and sig.INTER_TOKEN not in result.samples
    assert only(result, sig.PREFILL_TIME, le="0.05") == 300 and only(result, sig.DECODE_TIME, le="2.5") == 390
    # HTTP 400 and 500 failed the request; 503 and 429 turned it away.
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="error") == 5
    assert only(result, sig.REJECTIONS, reason="overloaded") == 9
    assert only(result, sig.REJECTIONS, reason="rate_limited") == 4
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="stop") == 410
    # engine_type="trtllm" names the engine, not a P/D role.
    assert {s.labels["role"] for ss in result.samples.values() for s in ss} == {"mixed"}


def test_tgi_overloaded_is_a_rejection_and_a_client_leaving_an_abort():
    result = normalize(fixture("tgi_current_source.txt"), TargetLabels("tgi:80", model="llama"))
    assert only(result, sig.REJECTIONS, reason="overloaded") == 40
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="error") == 8  # validation + generation
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="abort") == 7  # dropped + cancelled
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="success") == 500


def test_tgi_mean_time_per_token_is_a_per_request_tpot():
    result = normalize(fixture("tgi_metrics_handwritten.txt"), TargetLabels("tgi:80", model="llama"))
    assert only(result, sig.TPOT, le="0.025") == 700 and sig.INTER_TOKEN not in result.samples


def test_llamacpp_server():
    text = fixture("llamacpp_current_source.txt")
    result = normalize(text, TargetLabels("127.0.0.1:8080", model="qwen2.5-7b-q4"))
    assert result.engine == "llamacpp"
    assert only(result, sig.PROMPT_TOKENS) == 12840 and only(result, sig.GENERATION_TOKENS) == 5120
    assert only(result, sig.REQUESTS_RUNNING) == 2 and only(result, sig.REQUESTS_WAITING) == 4
    assert only(result, sig.KV_CACHE_USAGE) == 0.35
    assert {s.labels["model"] for ss in result.samples.values() for s in ss} == {"qwen2.5-7b-q4"}


def test_role_from_config_and_file_sd_is_validated():
    assert Target("http://h:1/metrics", role="decode").labels().role == "decode"
    with pytest.raises(TargetError, match="unknown role 'both'.*prefill, decode, mixed"):
        Target("http://h:1/metrics", role="both")
    (target,) = parse_file_sd('[{"targets": ["10.0.0.7:8000"], "labels": {"role": "prefill"}}]', "sd.json")
    assert target.role == "prefill"

"""Normalization of real and hand-written engine expositions into the catalog's llm_* signals."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.collectors.engine.normalize import NormalizeError, TargetLabels, normalize, select_lines
from infersight.signals import engine as sig
from tests.conftest import FIXTURES

METRICS = FIXTURES / "metrics"
LABELS = TargetLabels("n1:8000", pool="canary", node="n1", gpu="0,1")


def fixture(name: str) -> str:
    return (METRICS / name).read_text()


def values(result, signal, **match) -> list[float]:
    return [s.value for s in result.samples.get(signal, []) if all(s.labels.get(k) == v for k, v in match.items())]


def only(result, signal, **match) -> float:
    found = values(result, signal, **match)
    assert len(found) == 1, (signal.name, match, found)
    return found[0]


def engine_value(text: str, name: str, **labels) -> float:
    """The engine's own sample value, read with prometheus_client's parser (the reference)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise KeyError(name)


def test_vllm_current_names_map_to_every_signal():
    text = fixture("vllm_metrics_sample.txt")
    result = normalize(text, LABELS)
    assert result.engine == "vllm"
    assert only(result, sig.REQUESTS_RUNNING) == engine_value(text, "vllm:num_requests_running")
    assert only(result, sig.REQUESTS_WAITING) == engine_value(text, "vllm:num_requests_waiting")
    assert only(result, sig.KV_CACHE_USAGE) == engine_value(text, "vllm:kv_cache_usage_perc")
    assert only(result, sig.PREFIX_CACHE_QUERIES) == engine_value(text, "vllm:prefix_cache_queries_total")
    assert only(result, sig.PREFIX_CACHE_HITS) == engine_value(text, "vllm:prefix_cache_hits_total")
    assert only(result, sig.PREEMPTIONS) == engine_value(text, "vllm:num_preemptions_total")
    assert only(result, sig.PROMPT_TOKENS) == engine_value(text, "vllm:prompt_tokens_total")
    assert only(result, sig.GENERATION_TOKENS) == engine_value(text, "vllm:generation_tokens_total")
    for reason in ("stop", "length", "abort", "error"):
        assert only(result, sig.REQUESTS_FINISHED, finish_reason=reason) == engine_value(
            text, "vllm:request_success_total", finished_reason=reason)
    # KV capacity = num_gpu_blocks x block_size from cache_config_info (27050 x 16 in the fixture).
    assert only(result, sig.KV_CACHE_CAPACITY) == 27050 * 16
    for signal in (sig.TTFT, sig.INTER_TOKEN, sig.E2E, sig.QUEUE_TIME, sig.PREFILL_TIME, sig.DECODE_TIME):
        assert result.samples[signal], signal.name


def test_vllm_labels_target_model_dp_rank_and_config():
    result = normalize(fixture("vllm_metrics_sample.txt"), LABELS)
    for samples in result.samples.values():
        for s in samples:
            assert {k: s.labels[k] for k in ("instance", "engine", "model", "pool", "node", "gpu", "dp_rank")} == {
                "instance": "n1:8000", "engine": "vllm", "model": "Qwen/Qwen3-8B", "pool": "canary", "node": "n1",
                "gpu": "0,1", "dp_rank": "0"}, s
            assert "model_name" not in s.labels and "finished_reason" not in s.labels
    overridden = normalize(fixture("vllm_metrics_sample.txt"), TargetLabels("t", model="qwen3"))
    assert {s.labels["model"] for ss in overridden.samples.values() for s in ss} == {"qwen3"}


def test_histogram_buckets_pass_through_faithfully():
    text = fixture("vllm_metrics_sample.txt")
    result = normalize(text, LABELS)
    engine_buckets = {s.labels["le"]: s.value for f in text_string_to_metric_families(text)
                      if f.name == "vllm:time_to_first_token_seconds" for s in f.samples if s.name.endswith("_bucket")}
    ours = {s.labels["le"]: s.value for s in result.samples[sig.TTFT] if s.name.endswith("_bucket")}
    assert ours == engine_buckets and len(ours) > 10
    names = {s.name for s in result.samples[sig.TTFT]}
    assert names == {sig.TTFT.name + "_bucket", sig.TTFT.name + "_sum", sig.TTFT.name + "_count"}


def test_created_series_are_ignored():
    text = fixture("vllm_metrics_sample.txt")
    assert "_created" in text
    result = normalize(text, LABELS)
    assert not [s for ss in result.samples.values() for s in ss if "created" in s.name]
    # The same with `_created` written inside the counter and histogram families.
    inline = ("# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{model_name=\"m\"} 5.0\n"
              "vllm:prompt_tokens_created{model_name=\"m\"} 1.7e9\n"
              "# TYPE vllm:e2e_request_latency_seconds histogram\n"
              "vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 2.0\n"
              "vllm:e2e_request_latency_seconds_count{model_name=\"m\"} 2.0\n"
              "vllm:e2e_request_latency_seconds_sum{model_name=\"m\"} 3.0\n"
              "vllm:e2e_request_latency_seconds_created{model_name=\"m\"} 1.7e9\n")
    result = normalize(inline, LABELS)
    assert values(result, sig.PROMPT_TOKENS) == [5.0]
    assert sorted(s.name for s in result.samples[sig.E2E]) == [sig.E2E.name + x for x in ("_bucket", "_count", "_sum")]


def test_vllm_deprecated_names():
    text = fixture("vllm_v0_metrics_handwritten.txt")
    result = normalize(text, LABELS)
    assert result.engine == "vllm"
    assert only(result, sig.KV_CACHE_USAGE) == 0.42
    assert only(result, sig.PREFIX_CACHE_QUERIES) == 5000 and only(result, sig.PREFIX_CACHE_HITS) == 1250
    assert only(result, sig.INTER_TOKEN, le="0.025") == 1500
    assert only(result, sig.REQUESTS_WAITING, dp_rank="") == 9
    assert sig.KV_CACHE_CAPACITY not in result.samples  # num_gpu_blocks="None": unknown, not 0


def test_vllm_old_and_new_names_side_by_side_count_once():
    """During a deprecation window vLLM exposed both names: the current one wins, nothing doubles."""
    old = fixture("vllm_v0_metrics_handwritten.txt")
    new = fixture("vllm_metrics_sample.txt")
    result = normalize(new + old, LABELS)
    assert values(result, sig.KV_CACHE_USAGE, dp_rank="0") == [0.1875]
    assert not values(result, sig.KV_CACHE_USAGE, dp_rank="")  # the old family is not used at all
    assert values(result, sig.PREFIX_CACHE_HITS) == [7942.0]


def test_vllm_data_parallel_ranks_stay_apart():
    text = fixture("vllm_metrics_sample.txt")
    rank1 = "\n".join(line.replace('engine="0"', 'engine="1"') for line in text.splitlines()
                      if not line.startswith("#"))
    result = normalize(text + "\n" + rank1, LABELS)
    assert sorted(s.labels["dp_rank"] for s in result.samples[sig.REQUESTS_RUNNING]) == ["0", "1"]
    assert result.dropped_duplicates == 0


def test_sglang_colon_prefix_real_sample():
    text = fixture("sglang_metrics_sample.txt")
    result = normalize(text, LABELS)
    assert result.engine == "sglang"
    assert only(result, sig.REQUESTS_RUNNING) == 162 and only(result, sig.REQUESTS_WAITING) == 2826
    assert only(result, sig.KV_CACHE_USAGE) == 0.28
    assert only(result, sig.PROMPT_TOKENS) == engine_value(text, "sglang:prompt_tokens_total")
    assert only(result, sig.GENERATION_TOKENS) == engine_value(text, "sglang:generation_tokens_total")
    assert only(result, sig.INTER_TOKEN, le="0.1") == engine_value(
        text, "sglang:time_per_output_token_seconds_bucket", le="0.1")
    # This release has no cached_tokens counter: no hit-rate half is invented, and the per-batch
    # cache_hit_rate gauge is not passed off as a hit rate.
    assert sig.PREFIX_CACHE_HITS not in result.samples and sig.PREFIX_CACHE_QUERIES not in result.samples
    assert only(result, sig.REQUESTS_RUNNING) and "cache_hit_rate" not in str(result.samples)


def test_sglang_underscore_prefix_and_token_weighted_hit_rate():
    result = normalize(fixture("sglang_underscore_metrics_handwritten.txt"), LABELS)
    assert result.engine == "sglang"
    assert only(result, sig.PREFIX_CACHE_QUERIES) == 800000 and only(result, sig.PREFIX_CACHE_HITS) == 200000
    assert only(result, sig.KV_CACHE_CAPACITY) == 500000
    assert only(result, sig.REQUESTS_RUNNING, dp_rank="1", model="Qwen/Qwen2.5-7B") == 20
    # inter_token_latency_seconds wins over time_per_output_token_seconds when both exist.
    assert only(result, sig.INTER_TOKEN, le="0.02") == 50000
    assert only(result, sig.QUEUE_TIME, le="1.0") == 305


def test_tgi():
    result = normalize(fixture("tgi_metrics_handwritten.txt"), TargetLabels("tgi:80", model="llama-3-8b"))
    assert result.engine == "tgi"
    assert only(result, sig.REQUESTS_RUNNING) == 12 and only(result, sig.REQUESTS_WAITING) == 7
    assert only(result, sig.PROMPT_TOKENS) == 612345 and only(result, sig.GENERATION_TOKENS) == 201877
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="success") == 1201
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="error") == 34  # both `err` values summed
    assert only(result, sig.E2E, le="2.5") == 1010 and only(result, sig.QUEUE_TIME, le="0.1") == 1100
    assert {s.labels["model"] for ss in result.samples.values() for s in ss} == {"llama-3-8b"}


def test_triton_trtllm_backend():
    text = fixture("triton_trtllm_metrics_sample.txt")
    result = normalize(text, LABELS)
    assert result.engine == "triton"
    assert only(result, sig.REQUESTS_WAITING) == 1 and only(result, sig.REQUESTS_RUNNING) == 0
    assert only(result, sig.KV_CACHE_USAGE) == 0.4875
    assert only(result, sig.KV_CACHE_CAPACITY) == 6239 * 64
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="success", model="tensorrt_llm") == 0


def test_triton_milliseconds_become_seconds_and_versions_merge():
    result = normalize(fixture("triton_histograms_handwritten.txt"), LABELS)
    buckets = {s.labels["le"]: s.value for s in result.samples[sig.TTFT] if s.name.endswith("_bucket")}
    assert buckets == {"0.1": 10, "0.5": 18, "2.0": 20, "+Inf": 20}
    assert [s.value for s in result.samples[sig.TTFT] if s.name.endswith("_sum")] == [4.5]
    assert [s.value for s in result.samples[sig.TTFT] if s.name.endswith("_count")] == [20]
    # Versions 1 and 2 collide once `version` is dropped: counters are summed.
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="success") == 25
    assert result.dropped_duplicates == 1


def test_trtllm_serve():
    result = normalize(fixture("trtllm_serve_metrics_handwritten.txt"), LABELS)
    assert result.engine == "trtllm"
    assert only(result, sig.REQUESTS_FINISHED, finish_reason="stop", model="Qwen/Qwen3-0.6B") == 150
    # trtllm-serve observes time_per_output_token once per request: a per-request TPOT, not token gaps.
    assert only(result, sig.TTFT, le="0.05") == 12 and only(result, sig.TPOT, le="0.1") == 120
    assert sig.INTER_TOKEN not in result.samples
    assert only(result, sig.QUEUE_TIME, le="1.0") == 140 and only(result, sig.E2E, le="0.5") == 25
    dynamo = fixture("trtllm_serve_metrics_handwritten.txt").replace("trtllm_", "trtllm:")
    assert only(normalize(dynamo, LABELS), sig.TTFT, le="0.05") == 12


@pytest.mark.parametrize("name, engine", [
    ("vllm_metrics_sample.txt", "vllm"), ("vllm_v0_metrics_handwritten.txt", "vllm"),
    ("sglang_metrics_sample.txt", "sglang"), ("sglang_underscore_metrics_handwritten.txt", "sglang"),
    ("tgi_metrics_handwritten.txt", "tgi"), ("triton_trtllm_metrics_sample.txt", "triton"),
    ("trtllm_serve_metrics_handwritten.txt", "trtllm"), ("trtllm_serve_current_source.txt", "trtllm"),
    ("vllm_0_32_cpu_real.txt", "vllm"), ("sglang_pd_current_source.txt", "sglang"),
    ("tgi_current_source.txt", "tgi"), ("llamacpp_current_source.txt", "llamacpp"),
])
def test_engine_is_detected(name, engine):
    spec, lines = select_lines(fixture(name))
    assert spec is not None and spec.name == engine and lines


def test_configured_engine_ignores_other_engines_series():
    text = fixture("sglang_metrics_sample.txt") + fixture("vllm_metrics_sample.txt")
    assert normalize(text, LABELS).engine == "sglang"  # auto: the first engine seen
    result = normalize(text, LABELS, engine="vllm")
    assert result.engine == "vllm" and only(result, sig.REQUESTS_RUNNING) == 3


@pytest.mark.parametrize("text, reason", [
    ("<html><body>502 Bad Gateway</body></html>", "malformed"),
    ('{"status": "ok"}', "malformed"),
    ("", "unrecognized"),
    ("# TYPE node_load1 gauge\nnode_load1 0.5\n", "unrecognized"),
    ('vllm:num_requests_running{model_name="m" 3\n', "malformed"),  # a mapped family broken
    ("vllm:num_requests_running{model_name=\"m\"} three\n", "malformed"),
])
def test_bad_expositions_fail_the_whole_target(text, reason):
    with pytest.raises(NormalizeError) as info:
        normalize(text, LABELS)
    assert info.value.reason == reason
    assert str(info.value)


def test_configured_engine_that_is_absent_is_unrecognized():
    with pytest.raises(NormalizeError, match="no series of tgi") as info:
        normalize(fixture("vllm_metrics_sample.txt"), LABELS, engine="tgi")
    assert info.value.reason == "unrecognized"


def test_garbage_in_an_unmapped_family_does_not_matter():
    text = fixture("vllm_metrics_sample.txt") + "\nsome_other_exporter{broken 1 2 3\n"
    assert only(normalize(text, LABELS), sig.REQUESTS_RUNNING) == 3


def test_readme_mapping_table_matches_the_rules():
    from pathlib import Path

    from infersight.collectors.engine.mapping_doc import mapping_table

    readme = Path(__file__).resolve().parents[2] / "collectors" / "engine" / "README.md"
    assert mapping_table() in readme.read_text(), "regenerate: python -m infersight.collectors.engine.mapping_doc"


def test_histogram_without_inf_bucket_is_dropped_not_passed_on():
    # The docs excerpt elides vLLM's TTFT histogram: buckets up to 0.1 and a count, no +Inf.
    result = normalize(fixture("vllm_metrics_docs_excerpt.txt"), LABELS)
    assert sig.TTFT not in result.samples
    assert result.dropped_incomplete == 9  # 8 buckets + _count
    assert only(result, sig.REQUESTS_RUNNING) == 8  # the rest of the target is unaffected

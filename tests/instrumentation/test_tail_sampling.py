"""Tail sampling: the rolling quantile's accuracy and bounds, and each decision reason end to end."""

from __future__ import annotations

import json
import random
import time

import pytest

from infersight import attributes as attr
from infersight.instrumentation import RollingQuantile, TailSampler
from infersight.instrumentation import sampling as reasons
from tests.instrumentation.tracing_helpers import make_traced, replay_tokens

MODEL = "qwen-7b"


def exact_quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_rolling_quantile_is_within_one_bucket_of_the_exact_quantile(q):
    rng = random.Random(1)
    values = [rng.lognormvariate(-1.5, 0.8) for _ in range(5000)]  # TTFT-like: median ~0.22 s, long tail
    estimator = RollingQuantile(q, half_life=10**9, refresh=1)
    for value in values:
        estimator.observe(value)
    exact = exact_quantile(values, q)
    # The estimate is the upper edge of the bucket holding the quantile: at most one growth step above.
    assert exact <= estimator.value() * 1.0001
    assert estimator.value() <= exact * estimator.growth ** 2


def test_rolling_quantile_forgets_old_traffic():
    estimator = RollingQuantile(0.99, half_life=200)
    for _ in range(2000):
        estimator.observe(5.0)  # a slow period
    assert estimator.value() >= 5.0
    for _ in range(4000):
        estimator.observe(0.05)  # recovered: 20 half-lives later the old mode is negligible
    assert estimator.value() < 0.06


def test_rolling_quantile_memory_is_fixed():
    estimator = RollingQuantile(0.99)
    buckets = estimator._counts
    length_before = len(buckets)
    rng = random.Random(2)
    for _ in range(20000):
        estimator.observe(rng.expovariate(1.0) * 10 ** rng.randint(-5, 6))  # far outside low..high too
    assert estimator._counts is buckets and len(buckets) == length_before < 600  # decay is in place
    assert estimator.value() <= 1e4 * estimator.growth  # clamped to the top bucket, not grown


def test_rolling_quantile_rejects_bad_parameters():
    with pytest.raises(ValueError, match="quantile"):
        RollingQuantile(1.5)
    with pytest.raises(ValueError, match="growth"):
        RollingQuantile(0.99, growth=1.0)
    with pytest.raises(ValueError, match="random_share"):
        TailSampler(random_share=2)


def test_sampler_tracks_a_bounded_number_of_models():
    sampler = TailSampler(max_models=3)
    for i in range(10):
        sampler.decide(f"model-{i}", "success", 0.1, 1.0)
    assert len(sampler._models) == 3
    assert set(sampler._models) == {"model-7", "model-8", "model-9"}


def test_sampler_does_not_judge_slow_while_warming_up():
    sampler = TailSampler(random_share=0.0, min_samples=50)
    # The very first requests are arbitrarily "slow" against nothing: not kept.
    decisions = [sampler.decide(MODEL, "success", 0.1 * (i + 1), 1.0 * (i + 1)) for i in range(50)]
    assert decisions == [reasons.NOT_KEPT] * 50
    assert sampler.thresholds(MODEL)[0] is not None


def test_sampler_reasons():
    sampler = TailSampler(random_share=0.0, min_samples=100, seed=3)
    rng = random.Random(4)
    for _ in range(500):
        assert sampler.decide(MODEL, "success", rng.uniform(0.05, 0.1), rng.uniform(1.0, 2.0)) in (
            reasons.NOT_KEPT, reasons.SLOW_TTFT, reasons.SLOW_E2E)
    ttft_p99, e2e_p99 = sampler.thresholds(MODEL)
    assert 0.09 <= ttft_p99 <= 0.11 and 1.9 <= e2e_p99 <= 2.2
    assert sampler.decide(MODEL, "success", 0.07, 1.5) == reasons.NOT_KEPT
    assert sampler.decide(MODEL, "success", 0.5, 1.5) == reasons.SLOW_TTFT
    assert sampler.decide(MODEL, "success", 0.07, 9.0) == reasons.SLOW_E2E
    assert sampler.decide(MODEL, "success", None, 9.0) == reasons.SLOW_E2E  # no first token, still judged
    assert sampler.decide(MODEL, "error", 0.07, 1.5) == reasons.ERROR
    assert sampler.decide(MODEL, "timeout", None, 30.0) == reasons.TIMEOUT
    assert sampler.decide(MODEL, "cancelled", 0.07, 0.5) == reasons.CANCELLED
    # Another model has its own estimate: 0.5 s is not slow there until it has history.
    assert sampler.decide("other", "success", 0.5, 1.5) == reasons.NOT_KEPT


def test_random_share_keeps_about_that_share():
    sampler = TailSampler(random_share=0.1, min_samples=10**9, seed=5)
    kept = sum(sampler.decide(MODEL, "success", 0.1, 1.0) == reasons.RANDOM for _ in range(10000))
    assert 850 <= kept <= 1150
    assert all(TailSampler(random_share=0.0).decide(MODEL, "success", 0.1, 1.0) == reasons.NOT_KEPT
               for _ in range(100))


def request(traced, ttft_tokens: int = 3, outcome: str = "success"):
    req = traced.tracer.start(MODEL, instance="e0")
    for _ in range(ttft_tokens):
        req.token()
    if outcome == "success":
        return req.finish("stop")
    if outcome == "error":
        return req.fail("upstream_5xx")
    if outcome == "cancelled":
        return req.cancel()
    return req.timeout("total")


@pytest.mark.parametrize("outcome", ["error", "cancelled", "timeout"])
def test_failed_requests_keep_their_timeline_on_the_span(outcome):
    traced = make_traced(random_share=0.0)
    summary = request(traced, 4, outcome)
    span = traced.one(f"chat {MODEL}")
    assert span.attributes[attr.SAMPLING_REASON] == outcome
    offsets = json.loads(span.attributes[attr.TOKEN_OFFSETS_US])  # JSON text, as ClickHouse stores it
    assert offsets == summary.offsets_us and len(offsets) == 4
    assert offsets == sorted(offsets) and offsets[0] >= 0
    assert traced.metric("infersight_tracing_timelines_total", model=MODEL, reason=outcome) == 1


def test_slow_and_random_and_not_kept_end_to_end():
    # random_share=0 first: teach the sampler what "normal" looks like through real requests.
    traced = make_traced(random_share=0.0, min_samples=20)
    sampler = traced.tracer.sampler
    for _ in range(40):
        sampler.decide(MODEL, "success", 0.001, 0.002)  # fast history: TTFT 1 ms, e2e 2 ms
    traced.exporter.clear()

    fast = traced.tracer.start(MODEL)
    fast.token()
    assert fast.finish().sampling_reason == "not_kept"

    slow = traced.tracer.start(MODEL)
    slow_start = slow._start_ns
    while time.perf_counter_ns() < slow_start + 5_000_000:  # a first token after 5 ms (spin: exact, short)
        pass
    slow.token()
    slow_summary = slow.finish()
    assert slow_summary.sampling_reason == "slow_ttft"

    spans = traced.by_name(f"chat {MODEL}")
    not_kept, kept = spans
    assert attr.TOKEN_OFFSETS_US not in not_kept.attributes
    assert not_kept.attributes[attr.TOKEN_COUNT] == 1  # the summary travels anyway
    assert kept.attributes[attr.SAMPLING_REASON] == "slow_ttft"
    assert json.loads(kept.attributes[attr.TOKEN_OFFSETS_US])[0] >= 5000
    assert traced.metric("infersight_tracing_timelines_total", model=MODEL, reason="slow_ttft") == 1

    lucky = make_traced(random_share=1.0)
    summary = request(lucky, 2)
    assert summary.sampling_reason == "random"
    assert len(json.loads(lucky.one(f"chat {MODEL}").attributes[attr.TOKEN_OFFSETS_US])) == 2


def test_timeline_summary_attributes_find_the_longest_stall():
    traced = make_traced(random_share=1.0)
    req = traced.tracer.start(MODEL)
    # Exact token times: gaps of 1 ms, then a 40 ms stall before token 3.
    replay_tokens(req, [10, 11, 12, 52, 53])
    req.finish("stop")
    a = traced.one(f"chat {MODEL}").attributes
    assert a[attr.TOKEN_OFFSETS_US] == "[10000,11000,12000,52000,53000]"  # the Collector's AsString() text
    assert a[attr.TOKEN_COUNT] == 5
    assert a[attr.TOKEN_GAP_MAX_MS] == pytest.approx(40.0)
    assert a[attr.TOKEN_GAP_MEAN_MS] == pytest.approx(43.0 / 4)
    assert a[attr.TOKEN_STALL_INDEX] == 3
    assert a[attr.TOKEN_STALL_OFFSET_MS] == pytest.approx(12.0)
    assert a[attr.TTFT_MS] == pytest.approx(10.0)
    assert a[attr.TPOT_MS] == pytest.approx(43.0 / 4)

"""promtool ``promql_expr_test`` cases for the recording rules, with exactly computed values.

promtool 2.42 compares expected samples bit for bit, so the inputs are built to make every step
exact: each counter grows by 60 x k per minute, so a 5-minute rate over six samples 300 s apart is
exactly k; ratios are chosen to be representable (0.25, 0.75); quantiles are computed here with
the same float operations, in the same order, as PromQL's histogram_quantile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from infersight.alerts import recording as rec
from infersight.alerts.rules.common import (
    MODEL,
    NODE,
    POOL,
    engine_labels,
    gpu_labels,
    instance_labels,
    request_labels,
    require,
)
from infersight.alerts.series import absent_until_first_event, counter, gauge, histogram, le, steps
from infersight.attributes import Outcome
from infersight.signals import Signal, engine, gateway, gpu, request
from infersight.signals.engine import EngineRole
from infersight.thresholds import BURN_WINDOWS, Thresholds

AT = "10m"  # the 5-minute window [5m, 10m] holds six samples: no extrapolation
LONG_AT = "40m"  # the same for the 15- and 30-minute windows
MINUTES = 45


def histogram_quantile(buckets: Sequence[float], per_second: Mapping[float, int], q: float) -> float:
    """PromQL 2.42's bucketQuantile on these per-second bucket rates, step by step."""
    bounds = [*buckets, math.inf]
    counts = [float(sum(n for v, n in per_second.items() if v <= b)) for b in bounds]
    rank = q * counts[-1]
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(bounds) - 1:
        return bounds[-2]
    bucket_start = 0.0 if b == 0 else bounds[b - 1]
    bucket_end = bounds[b]
    count = counts[b]
    if b > 0:
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return bucket_start + (bucket_end - bucket_start) * (rank / count)


def _median(values: Sequence[float]) -> float:
    """PromQL's ``quantile(0.5, ...)``, the same float operations in the same order."""
    ordered = sorted(values)
    rank = 0.5 * (len(ordered) - 1)
    lower = math.floor(rank)
    upper = min(len(ordered) - 1, lower + 1)
    weight = rank - lower
    return ordered[lower] * (1 - weight) + ordered[upper] * weight


def _sample(record: str, labels: Mapping[str, str], value: float) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"labels": f"{record}{{{inner}}}", "value": value}


def _quantile_cases() -> tuple[list, list]:
    """Two instances with different latency; quantiles by instance and by model."""
    series, tests = [], []
    for signal, per_instance in ((request.TTFT, {"e1:8000": {0.5: 3, 0.75: 1}, "e2:8000": {0.25: 2, 1.0: 2}}),
                                 (request.TPOT, {"e1:8000": {0.05: 3, 0.1: 1}, "e2:8000": {0.025: 2, 0.2: 2}})):
        for instance, per_second in per_instance.items():
            per_minute = {v: 60 * n for v, n in per_second.items()}
            series += histogram(signal, request_labels(instance), [(per_minute, MINUTES)])
        merged: dict[float, int] = {}
        for per_second in per_instance.values():
            for v, n in per_second.items():
                merged[v] = merged.get(v, 0) + n
        for q in rec.QUANTILES:
            by_instance, by_model = (rec.quantile_name(signal, level, q) for level in (rec.INSTANCE_LEVEL, ("model",)))
            samples = [_sample(by_instance, instance_labels(i), histogram_quantile(signal.buckets, ps, q))
                       for i, ps in per_instance.items()]
            tests.append({"expr": f'{by_instance}{{model="{MODEL}"}}', "eval_time": AT, "exp_samples": samples})
            tests.append({"expr": f'{by_model}{{model="{MODEL}"}}', "eval_time": AT,
                          "exp_samples": [_sample(by_model, {"model": MODEL},
                                                  histogram_quantile(signal.buckets, merged, q))]})
        if signal is request.TTFT:  # the 30-minute p95: steady traffic, the same value
            tests.append({"expr": f'{rec.TTFT_P95_30M_BY_MODEL}{{model="{MODEL}"}}', "eval_time": AT,
                          "exp_samples": [_sample(rec.TTFT_P95_30M_BY_MODEL, {"model": MODEL},
                                                  histogram_quantile(signal.buckets, merged, 0.95))]})
    return series, tests


def _rate(signal: Signal, labels: Mapping[str, str], per_second: int):
    return counter(signal, labels, [(60 * per_second, MINUTES)])


def _rounded(record: str, labels: Mapping[str, str], value: float, selector: str = "", at: str = AT) -> dict:
    """A test on ``round(record, 0.0001)``: rates pick up last-bit noise (extrapolation factors), the
    rounded value does not, and the expected value is rounded the way PromQL's round() does it."""
    nearest_inverse = 1.0 / 0.0001
    expected = math.floor(value * nearest_inverse + 0.5) / nearest_inverse
    return {"expr": f"round({record}{selector}, 0.0001)", "eval_time": at,
            "exp_samples": [{"labels": _sample("", labels, 0)["labels"], "value": expected}]}


def recording_test_file(limits: Thresholds, recording_rule_file: str) -> dict:
    series, tests = _quantile_cases()
    one = lambda record, labels, value: tests.append(  # noqa: E731
        {"expr": record, "eval_time": AT, "exp_samples": [_sample(record, labels, value)]})
    model, model_pool = {"model": MODEL}, {"model": MODEL, "pool": POOL}

    # The breaker's view: engine-side p99 per instance and the pool's median of them. A fourth
    # instance served nothing in the window (its buckets flat): no p99, and nobody's peer. A canary
    # pool of 2 beside them has no peers of its own: its line comes from the model's instances.
    own = {"e1:8000": {0.25: 3, 0.75: 1}, "e2:8000": {0.5: 2, 2.5: 2}, "e3:8000": {1.0: 3, 5.0: 1}}
    canary = {"c1:8000": {1.0: 2, 8.0: 2}, "c2:8000": {0.25: 4}}
    pools = {**{i: POOL for i in own}, **{i: "canary" for i in canary}}
    for instance, per_second in {**own, **canary}.items():
        series += histogram(engine.TTFT, engine_labels(instance, pool=pools[instance]),
                            [({v: 60 * n for v, n in per_second.items()}, MINUTES)])
    series += histogram(engine.TTFT, engine_labels("e4:8000"), [({0.25: 60}, 1), ({}, MINUTES - 1)])
    p99s = {i: histogram_quantile(engine.TTFT.buckets, ps, 0.99) for i, ps in {**own, **canary}.items()}
    at = lambda i: instance_labels(i, pool=pools[i])  # noqa: E731
    tests.append({"expr": rec.ENGINE_TTFT_P99_BY_INSTANCE, "eval_time": AT,
                  "exp_samples": [_sample(rec.ENGINE_TTFT_P99_BY_INSTANCE, at(i), v) for i, v in p99s.items()]})
    stable_median = sorted(p99s[i] for i in own)[1]
    canary_median = _median([p99s[i] for i in canary])
    model_median = _median(list(p99s.values()))
    tests.append({"expr": rec.ENGINE_TTFT_P99_POOL_MEDIAN, "eval_time": AT,
                  "exp_samples": [_sample(rec.ENGINE_TTFT_P99_POOL_MEDIAN, model_pool, stable_median),
                                  _sample(rec.ENGINE_TTFT_P99_POOL_MEDIAN, {**model_pool, "pool": "canary"},
                                          canary_median)]})
    one(rec.ENGINE_TTFT_P99_MODEL_ROLE_MEDIAN, {**model, "role": "mixed"}, model_median)
    peers = {POOL: stable_median, "canary": model_median}
    lines = {pool: max(limits.instance_p99_ttft_seconds, limits.instance_p99_peer_factor * v)
             for pool, v in peers.items()}
    tests.append({"expr": rec.ENGINE_TTFT_P99_PEERS, "eval_time": AT,
                  "exp_samples": [_sample(rec.ENGINE_TTFT_P99_PEERS, {**model, "pool": pool}, v)
                                  for pool, v in peers.items()]})
    tests.append({"expr": rec.ENGINE_TTFT_BREAKER_LINE, "eval_time": AT,
                  "exp_samples": [_sample(rec.ENGINE_TTFT_BREAKER_LINE, {**model, "pool": pool}, v)
                                  for pool, v in lines.items()]})
    tests.append({"expr": rec.ENGINE_TTFT_BOUND, "eval_time": AT,
                  "exp_samples": [_sample(rec.ENGINE_TTFT_BOUND, {"le": le(b)}, b) for b in engine.TTFT.buckets]})

    def over_line(instance: str) -> float:
        bound = next(b for b in engine.TTFT.buckets if b >= lines[pools[instance]])
        per_second = {**own, **canary}[instance]
        return 1 - sum(n for v, n in per_second.items() if v <= bound) / sum(per_second.values())

    require(over_line("c1:8000") > 0, "the canary's slow instance must be over its line")
    tests.append({"expr": rec.ENGINE_TTFT_OVER_LINE, "eval_time": AT,
                  "exp_samples": [_sample(rec.ENGINE_TTFT_OVER_LINE, at(i), over_line(i)) for i in p99s]})

    # queues: two strategies at the gateway, two engines on one node
    series += [gauge(gateway.QUEUE_DEPTH, {**model_pool, "strategy": s}, [(n, MINUTES)]) for s, n in (("a", 3),
                                                                                                   ("b", 4))]
    series += [gauge(engine.REQUESTS_WAITING, engine_labels(t), [(n, MINUTES)]) for t, n in (("e1:8000", 5),
                                                                                          ("e2:8000", 6))]
    one(rec.GATEWAY_QUEUE_SUM, model_pool, 7)
    one(rec.GATEWAY_QUEUE_AVG30M, model_pool, 7)
    tests.append({"expr": rec.INSTANCE_QUEUE_SUM, "eval_time": AT,
                  "exp_samples": [_sample(rec.INSTANCE_QUEUE_SUM, {**model_pool, "instance": t}, n)
                                  for t, n in (("e1:8000", 5), ("e2:8000", 6))]})
    # Scale-out signal 1, seconds of waiting: measured 0.25 s at the gateway (15 s of waiting a second
    # over the 60 requests/s it finishes) + 0.5 s in the engines;
    # drained 18 queued (7 at the gateway, 11 in the engines) over the 60 requests/s the gateway
    # completes (below; no engine counts its finished requests here) = 0.3 s; the larger 0.75 s.
    # (The drained estimate alone: LLMGatewayQueueHigh's gateway cases.) Read at LONG_AT: 30-minute rates.
    series += histogram(request.QUEUE_TIME, request_labels(), [({0.25: 60 * 60}, MINUTES)])
    series += histogram(engine.QUEUE_TIME, engine_labels(), [({0.5: 60 * 2}, MINUTES)])
    one(rec.POOL_QUEUE_SUM, model_pool, 18)
    one(rec.POOL_QUEUE_AVG30M, model_pool, 18)
    tests.extend([_rounded(rec.QUEUE_WAIT_MEASURED_30M, model_pool, 0.75, at=LONG_AT),
                  _rounded(rec.QUEUE_DRAIN_30M, model_pool, 0.3, at=LONG_AT),
                  _rounded(rec.QUEUE_WAIT_30M, model_pool, 0.75, at=LONG_AT)])
    one(rec.MODEL_QUEUE_SUM, model, 11)
    one(rec.MODEL_QUEUE_AVG30M, model, 11)
    one(rec.NODE_QUEUE_SUM, {"node": NODE}, 11)
    series.append(gauge(request.IN_FLIGHT, request_labels(), [(9, MINUTES)]))
    one(rec.IN_FLIGHT_SUM, model, 9)

    # instances: three serving, one ejected (one ejection inside the last 5 minutes)
    for i, state in enumerate(("healthy", "healthy", "half_open", "ejected")):
        labels = instance_labels(f"i{i}")
        for name in ("healthy", "half_open", "ejected"):
            series.append(gauge(gateway.INSTANCE_STATE, {**labels, "state": name}, [(int(name == state), MINUTES)]))
        series.append(steps(gateway.EJECTIONS, labels, MINUTES, [8] if state == "ejected" else []))
    one(rec.SERVING_INSTANCES, model, 3)
    # Scale-out signal 3, demand as a share of capacity: 9 requests in flight of 3 x requests_per_instance;
    # prompt tokens to prefill (the engine's prompt tokens less its 200/s of prefix-cache hits, below)
    # of the prefill capacity; the larger of the two. The instances that prefill: engine e1, which
    # decodes too, and p1, a disaggregated prefill instance (it runs fuller: its own share); a
    # disaggregated decode instance's prompt tokens came over the KV link (not prefill work, not
    # prefill capacity), and the ejected i3 is no capacity.
    capacity = limits.prefill_capacity_tokens_per_s + limits.prefill_only_capacity_tokens_per_s
    prompt_per_s = 200 + round(0.3 * capacity)
    series += [_rate(engine.PROMPT_TOKENS, engine_labels(), prompt_per_s - 100),
               _rate(engine.PROMPT_TOKENS, engine_labels("p1:8000", role=EngineRole.PREFILL), 100),
               _rate(engine.PROMPT_TOKENS, engine_labels("d1:8000", role=EngineRole.DECODE), 1000),
               _rate(engine.PROMPT_TOKENS, engine_labels("i3"), 0)]
    one(rec.PREFILL_CAPACITY, model, capacity)
    in_flight_share = 9 / (3 * limits.requests_per_instance)
    prefill_share = (prompt_per_s - 200) / capacity
    require(prefill_share > in_flight_share, "the prefill share must be the larger")
    tests.extend([_rounded(rec.IN_FLIGHT_CAPACITY_RATIO, model, in_flight_share),
                  _rounded(rec.PREFILL_TOKENS_RATE, model, prompt_per_s - 200, at=LONG_AT),
                  _rounded(rec.PREFILL_CAPACITY_RATIO, model, prefill_share, at=LONG_AT),
                  _rounded(rec.DEMAND_CAPACITY_RATIO, model, prefill_share, at=LONG_AT)])
    one(rec.EJECTED_SHARE, model_pool, 0.25)
    one(rec.EJECTED_COUNT, model_pool, 1)
    # Before the ejection at minute 8 a healthy pool reads 0, not "no data".
    tests.append({"expr": rec.EJECTED_SHARE, "eval_time": "3m",
                  "exp_samples": [_sample(rec.EJECTED_SHARE, model_pool, 0)]})

    # ratios of rates, 0.25 each
    series += [_rate(request.REQUESTS, request_labels(outcome=Outcome.SUCCESS), 45),
               _rate(request.REQUESTS, request_labels(outcome=Outcome.REJECTED), 15),
               _rate(request.REJECTIONS, request_labels(reason="queue_full"), 15),
               _rate(request.RETRIES, request_labels(), 10),  # with the client retries below: 0.25
               _rate(request.CLIENT_RETRIES, request_labels(), 5),
               _rate(request.INPUT_TOKENS, request_labels(), 400),
               _rate(request.CACHED_INPUT_TOKENS, request_labels(), 100),
               _rate(engine.PREFIX_CACHE_QUERIES, engine_labels(), 800),
               _rate(engine.PREFIX_CACHE_HITS, engine_labels(), 200)]
    tests.extend([_rounded(rec.RETRIES_PER_REQUEST, model, 0.25),
                  _rounded(rec.REJECTION_RATIO, model, 0.25),
                  _rounded(rec.CACHED_INPUT_RATIO, instance_labels("e1:8000"), 0.25),
                  _rounded(rec.PREFIX_HIT_RATIO, model, 0.25)])

    # GPU: bandwidth and SM activity averaged over 5 minutes and over the GPU's sources
    series += [gauge(gpu.MEMORY_BANDWIDTH_UTILIZATION, gpu_labels(source="gpm"), [(0.5, MINUTES)]),
               gauge(gpu.SM_ACTIVITY, gpu_labels(), [(0.25, MINUTES)])]
    one(rec.BANDWIDTH_AVG5M, {"node": NODE, "gpu": "0"}, 0.5)
    one(rec.SM_ACTIVITY_AVG5M, {"node": NODE, "gpu": "0"}, 0.25)

    # SLO errors: the quantile histograms above are model m1 too, so this uses another model
    slo_model = "slo-check"
    bound = limits.ttft_slo_seconds
    above = next((b for b in request.TTFT.buckets if b > bound), math.inf)
    series += histogram(request.TTFT, {**request_labels(), "model": slo_model},
                        [({bound: 60 * 45, above: 60 * 15}, MINUTES)])
    for window in BURN_WINDOWS:
        tests.append(_rounded(rec.slo_errors_name(window), {"model": slo_model}, 0.25, f'{{model="{slo_model}"}}'))

    # The twin: every counter absent until its first event (DESIGN 8); the recorded values hold.
    twin = absent_until_first_event(series)
    return {
        "rule_files": [recording_rule_file],
        "evaluation_interval": "1m",
        "tests": [{"name": name, "interval": "1m",
                   "input_series": [{"series": s.selector, "values": s.values} for s in inputs],
                   "promql_expr_test": tests}
                  for name, inputs in (("recording rules", series),
                                       ("recording rules (counters absent until their first event)", twin))],
    }


"""Request metrics from the catalog: values through the tracer, the bulk inter-token histogram,
and a real Prometheus scraping them."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from infersight.instrumentation.series import Family
from infersight.signals import gateway, request
from tests.conftest import require_tool
from tests.instrumentation.tracing_helpers import make_traced, replay_tokens

MODEL = "mistral-7b"
LABELS = dict(model=MODEL, instance="e1", pool="canary", strategy="equal_cost")


def samples(registry: CollectorRegistry, name: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.startswith(name):
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_bulk_histogram_exposes_exactly_what_a_prometheus_histogram_would():
    values = [random.Random(9).uniform(0.0, 3.0) for _ in range(500)] + list(request.TPOT_BUCKETS)  # edges too
    ours, reference = CollectorRegistry(), CollectorRegistry()
    bulk = Family(request.INTER_TOKEN, ours)
    cell = bulk.cell(("m", "i", "p", "s"))
    bulk.observe_many(cell, values[:300])
    bulk.observe_many(cell, values[300:])
    plain = Histogram(request.INTER_TOKEN.name, request.INTER_TOKEN.help, request.INTER_TOKEN.labels,
                      buckets=request.INTER_TOKEN.buckets, registry=reference)
    for value in values:
        plain.labels("m", "i", "p", "s").observe(value)
    got, want = samples(ours, request.INTER_TOKEN.name), samples(reference, request.INTER_TOKEN.name)
    want = {k: v for k, v in want.items() if not k[0].endswith("_created")}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert abs(got[key] - value) < 1e-9, key


def test_tracer_metrics_for_one_streamed_request():
    traced = make_traced()
    req = traced.tracer.start(MODEL, pool="canary", strategy="equal_cost")
    req.queued()
    assert traced.metric(gateway.QUEUE_DEPTH.name, model=MODEL, pool="canary", strategy="equal_cost") == 1
    req.routed("e1")
    assert traced.metric(gateway.QUEUE_DEPTH.name, model=MODEL, pool="canary", strategy="equal_cost") == 0
    assert traced.metric(request.IN_FLIGHT.name, **LABELS) == 1
    replay_tokens(req, [50, 60, 75, 80, 300])  # TTFT 50 ms, gaps 10, 15, 5, 220 ms
    req.finish("stop", input_tokens=100, cached_input_tokens=60, output_tokens=5)

    m = traced.metric
    assert m(request.IN_FLIGHT.name, **LABELS) == 0
    assert m(request.REQUESTS.name, outcome="success", **LABELS) == 1
    assert m(request.TTFT.name + "_sum", **LABELS) == 0.05
    assert m(request.TTFT.name + "_bucket", le="0.06", **LABELS) == 1
    assert m(request.TTFT.name + "_bucket", le="0.04", **LABELS) == 0
    assert abs(m(request.TPOT.name + "_sum", **LABELS) - 0.0625) < 1e-12  # (300 - 50) / 4 ms
    assert m(request.INTER_TOKEN.name + "_count", **LABELS) == 4
    assert abs(m(request.INTER_TOKEN.name + "_sum", **LABELS) - 0.25) < 1e-12
    assert m(request.INTER_TOKEN.name + "_bucket", le="0.01", **LABELS) == 2  # 5 and 10 ms
    assert m(request.INTER_TOKEN.name + "_bucket", le="0.2", **LABELS) == 3
    assert m(request.QUEUE_TIME.name + "_count", **LABELS) == 1
    assert m(request.E2E.name + "_count", **LABELS) == 1
    assert m(request.INPUT_TOKENS.name, **LABELS) == 100
    assert m(request.CACHED_INPUT_TOKENS.name, **LABELS) == 60
    assert m(request.OUTPUT_TOKENS.name, **LABELS) == 5


def test_non_streaming_request_uses_usage_and_first_token_mark():
    traced = make_traced()
    req = traced.tracer.start(MODEL, instance="e1", pool="canary", strategy="equal_cost")
    req.first_token()
    summary = req.finish("stop", output_tokens=20)
    assert summary.ttft_s is not None and summary.token_count == 0
    assert traced.metric(request.OUTPUT_TOKENS.name, **LABELS) == 20
    assert traced.metric(request.TPOT.name + "_count", **LABELS) == 1
    assert traced.metric(request.INTER_TOKEN.name + "_count", **LABELS) is None  # no stream, no gaps


def test_real_prometheus_scrapes_the_request_metrics(prometheus_server):
    require_tool("prometheus")
    traced = make_traced()
    for i in range(20):
        with traced.tracer.start(MODEL, instance="e1", pool="canary", strategy="equal_cost") as req:
            replay_tokens(req, [100 + 20 * k for k in range(1, 11)])  # TTFT 120 ms, gaps 20 ms
            if i % 5 == 0:
                req.timeout("idle")
            else:
                req.finish("stop")
    server, thread = start_http_server(0, addr="127.0.0.1", registry=traced.registry)
    try:
        prom = prometheus_server([f"127.0.0.1:{server.server_port}"])
        count = prom.wait_for(f"sum({request.INTER_TOKEN.count(model=MODEL)})")
        assert float(count[0]["value"][1]) == 20 * 9
        p50 = prom.query(f"histogram_quantile(0.5, sum by (le) ({request.INTER_TOKEN.bucket(model=MODEL)}))")
        assert 0.0125 <= float(p50[0]["value"][1]) <= 0.025  # 20 ms gaps fall in the (0.01, 0.025] bucket
        timeouts = prom.query(request.TIMEOUTS.select(kind="idle", pool="canary"))
        assert float(timeouts[0]["value"][1]) == 4
        outcomes = {r["metric"]["outcome"]: float(r["value"][1]) for r in prom.query(request.REQUESTS.select())}
        # every outcome is there from the first request, at 0 until it happens (DESIGN 8)
        assert outcomes == {"success": 16.0, "timeout": 4.0, "error": 0.0, "cancelled": 0.0, "rejected": 0.0}
    finally:
        server.shutdown()
        server.server_close()


def test_a_label_set_has_every_outcome_timeout_and_rejection_at_zero_from_its_first_request():
    traced = make_traced()
    with traced.tracer.start(MODEL, instance="e1", pool="canary", strategy="equal_cost") as req:
        req.token()
        req.finish("stop")
    m = traced.metric
    assert {o: m(request.REQUESTS.name, outcome=o, **LABELS) for o in request.OUTCOMES} == {
        "success": 1, "error": 0, "cancelled": 0, "timeout": 0, "rejected": 0}
    assert [m(request.TIMEOUTS.name, kind=k, **LABELS) for k in request.TIMEOUT_KINDS] == [0, 0, 0]
    assert [m(request.REJECTIONS.name, reason=r, **LABELS) for r in request.REJECTION_REASONS] == [0, 0]
    assert m(request.CLIENT_RETRIES.name, **LABELS) == 0


def test_client_retries_from_sdk_headers_and_repeated_keys():
    traced = make_traced()

    def one(headers=None, request_id=None):
        with traced.tracer.start(MODEL, instance="e1", pool="canary", strategy="equal_cost", headers=headers,
                                 request_id=request_id) as req:
            req.finish("stop")

    one({"X-Stainless-Retry-Count": "0"})  # the SDK's first attempt
    one({"x-stainless-retry-count": "2"})  # its third
    one({"x-stainless-retry-count": "many"})  # malformed: not a retry, and no error
    one({"Idempotency-Key": "k-1"})
    one({"Idempotency-Key": "k-1"})  # the caller's own retry, same key
    one(request_id="req-7")
    one(request_id="req-7")
    assert traced.metric(request.REQUESTS.name, outcome="success", **LABELS) == 7
    assert traced.metric(request.CLIENT_RETRIES.name, **LABELS) == 3


def test_one_key_in_several_headers_is_one_request_not_a_retry():
    from infersight.instrumentation.client_retries import ClientRetryDetector

    detector = ClientRetryDetector()
    # A gateway that sets X-Request-Id to the caller's Idempotency-Key, and passes it as the request id.
    first = {"Idempotency-Key": "k-9", "X-Request-Id": "k-9"}
    assert not detector.is_retry(first, request_id="k-9")
    assert detector.is_retry(first, request_id="k-9")  # the same request sent again
    assert not detector.is_retry({"idempotency-key": "k-10", "x-request-id": "k-10"})


def test_remembered_keys_stay_bounded():
    from infersight.instrumentation.client_retries import ClientRetryDetector

    detector = ClientRetryDetector(remembered=100)
    assert not any(detector.is_retry({"x-request-id": f"id-{i}"}) for i in range(1000))
    assert len(detector._seen) == 100
    assert detector.is_retry({"x-request-id": "id-999"}) and not detector.is_retry({"x-request-id": "id-0"})

"""Our expositions carry no ``_created`` series, and nothing else changes."""

from __future__ import annotations

import urllib.request

from opentelemetry.trace import NoOpTracerProvider
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infersight.exposition import generate, without_created
from infersight.instrumentation import RequestTracer
from infersight.signals.request import SPANS_DROPPED


def traced_registry() -> CollectorRegistry:
    """The tracer's request metrics (rendered from templates) beside prometheus_client's own metrics."""
    registry = CollectorRegistry()
    SPANS_DROPPED.register(registry).labels("gateway", "queue_full").inc()
    Histogram("infersight_test_latency_seconds", "A prometheus_client histogram.", registry=registry).observe(0.2)
    tracer = RequestTracer(registry=registry, tracer_provider=NoOpTracerProvider())
    for instance in ("10.0.0.1:8000", "10.0.0.2:8000"):
        with tracer.start("m", instance=instance) as req:
            req.token()
            req.token()
            req.finish("stop", input_tokens=5, output_tokens=2)
    return registry


def samples(text: str) -> set[tuple]:
    return {(s.name, tuple(sorted(s.labels.items())), s.value)
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_no_created_series_and_every_other_sample_unchanged():
    registry = traced_registry()
    theirs, ours = samples(generate_latest(registry).decode()), samples(generate(registry).decode())
    created = {s for s in theirs if s[0].endswith("_created")}
    assert created  # prometheus_client does emit them for its own metrics: the test can fail
    assert not any(s[0].endswith("_created") for s in ours)
    assert ours == theirs - created


def test_the_http_exporter_serves_without_created_and_honours_name_filters():
    from infersight.collectors.exporter import serve

    server, thread = serve(traced_registry(), "127.0.0.1:0")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "llm_requests_total{" in text and "_created" not in text
        only = urllib.request.urlopen(url + "?name[]=llm_requests_total", timeout=10).read().decode()
        assert "llm_requests_total{" in only and "llm_time_to_first_token" not in only and "_created" not in only
    finally:
        server.shutdown()
    wrapped = without_created(CollectorRegistry())
    assert without_created(wrapped) is wrapped  # wrapping twice adds nothing

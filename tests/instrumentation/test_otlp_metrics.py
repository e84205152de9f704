"""Request metrics over OTLP: GenAI names and attributes, buckets and counters unchanged, through the
real OTLP/HTTP exporter into a local receiver that decodes the protobuf."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from infersight import attributes as attr
from infersight.instrumentation import RequestTracer
from infersight.instrumentation.otlp_metrics import RequestMetricsPush, convert
from infersight.signals import request


class MetricsReceiver:
    """OTLP/HTTP /v1/metrics on 127.0.0.1, keeping each decoded request."""

    def __init__(self) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's method name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                message = ExportMetricsServiceRequest()
                message.ParseFromString(body)
                receiver.requests.append(message)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/metrics"

    def metrics(self) -> dict:
        out = {}
        for message in self.requests:
            for rm in message.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        out[metric.name] = metric
        return out

    def stop(self) -> None:
        self.server.shutdown()


def attributes(point) -> dict:
    values = {}
    for kv in point.attributes:
        value = kv.value
        values[kv.key] = value.int_value if value.HasField("int_value") else value.string_value
    return values


def traffic(tracer: RequestTracer) -> None:
    for ttft in (0.03, 0.3, 0.3):
        with tracer.start("qwen3-8b", instance="10.0.0.7:8000", pool="stable", strategy="cache_aware") as req:
            req.first_token()
            req._first_token_ns = req._start_ns + int(ttft * 1e9)
            req.finish("stop", input_tokens=900, output_tokens=20, cached_input_tokens=512)


def test_genai_names_and_attributes_over_the_real_otlp_exporter():
    tracer = RequestTracer(provider_name="vllm")
    traffic(tracer)
    receiver = MetricsReceiver()
    push = RequestMetricsPush(tracer.registry, OTLPMetricExporter(endpoint=receiver.url), service_name="gateway",
                              operation="chat", provider="vllm", interval_seconds=60)
    try:
        assert push.export_once().name == "SUCCESS"
    finally:
        push.shutdown()
        receiver.stop()
    metrics = receiver.metrics()
    ttft = metrics["gen_ai.server.time_to_first_token"]
    assert ttft.unit == "s"
    point = ttft.histogram.data_points[0]
    assert attributes(point) == {attr.GEN_AI_OPERATION_NAME: "chat", attr.GEN_AI_PROVIDER_NAME: "vllm",
                                 attr.GEN_AI_REQUEST_MODEL: "qwen3-8b", attr.SERVER_ADDRESS: "10.0.0.7",
                                 attr.SERVER_PORT: 8000, attr.POOL: "stable", attr.ROUTING_STRATEGY: "cache_aware"}
    # The catalog's buckets, per bucket (OTLP) rather than cumulative (Prometheus): one at 0.04, two at 0.5.
    assert list(point.explicit_bounds) == list(request.TTFT.buckets)
    assert point.count == 3 and sum(point.bucket_counts) == 3
    assert point.bucket_counts[request.TTFT.buckets.index(0.04)] == 1
    assert point.bucket_counts[request.TTFT.buckets.index(0.5)] == 2
    assert point.sum == pytest.approx(0.63, rel=1e-3)
    for name in ("gen_ai.server.request.duration", "gen_ai.server.time_per_output_token"):
        assert name in metrics
    tokens = metrics["gen_ai.client.inference.usage.detailed.input_tokens"]
    assert tokens.unit == "{token}" and tokens.sum.is_monotonic
    assert tokens.sum.data_points[0].as_double == 2700
    assert attributes(tokens.sum.data_points[0])["gen_ai.token.modality"] == "text"
    cached = metrics["gen_ai.client.inference.usage.detailed.cache_read.input_tokens"]
    assert cached.sum.data_points[0].as_double == 1536
    # No convention for requests by outcome: the catalog name and labels stay.
    outcomes = metrics[request.REQUESTS.name].sum.data_points
    # Every outcome exists from the first request on (created at 0, DESIGN 8); only success counted.
    by_outcome = {attributes(p)["outcome"]: p.as_double for p in outcomes}
    assert by_outcome.pop("success") == 3 and by_outcome and set(by_outcome.values()) == {0}
    assert request.TTFT.name not in metrics


def test_convert_counts_once_and_the_push_survives_a_failing_exporter():
    tracer = RequestTracer()
    traffic(tracer)
    names = [m.name for m in convert(tracer.registry, operation="chat", provider=None, start_unix_nano=1)]
    assert len(names) == len(set(names))  # one metric per signal (no _created twins)

    class Broken:
        def export(self, *args, **kwargs):
            raise ConnectionError("collector gone")

        def shutdown(self, *args, **kwargs):
            pass

    push = RequestMetricsPush(tracer.registry, Broken(), service_name="gateway", interval_seconds=0.05)
    deadline = time.monotonic() + 20
    while push.results.get("failure", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    push.shutdown()
    assert push.results["failure"] >= 2  # counted, and the thread kept going


def test_the_tracing_config_turns_the_push_on():
    from infersight.config import parse_config
    from infersight.instrumentation.otlp_metrics import push_from_config

    tracer = RequestTracer()
    traffic(tracer)
    assert push_from_config(parse_config({}).tracing, tracer.registry, "proxy") is None
    receiver = MetricsReceiver()
    config = parse_config({"tracing": {"metrics_otlp_endpoint": receiver.url.removesuffix("/v1/metrics"),
                                       "metrics_interval_seconds": 60}})
    push = push_from_config(config.tracing, tracer.registry, "proxy", provider="vllm")
    push.shutdown()  # the last push on shutdown delivers what was counted
    receiver.stop()
    assert "gen_ai.server.request.duration" in receiver.metrics()
    with pytest.raises(Exception, match="OTLP/HTTP URL"):
        parse_config({"tracing": {"metrics_otlp_endpoint": "localhost:4318"}})

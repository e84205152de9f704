"""OTLP push through the real OTel SDK exporter, received by a small HTTP endpoint and decoded with
the real OTLP protobuf classes."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from infersight.collectors.gpu.app import GPUExporter
from infersight.collectors.gpu.otlp import make_exporter, metrics_url
from infersight.collectors.gpu.series import all_series
from infersight.collectors.gpu.sim import SimBackend
from infersight.signals import gpu


class OTLPReceiver:
    """Accepts OTLP/HTTP protobuf metric exports on 127.0.0.1 and keeps the decoded requests."""

    def __init__(self, status: int = 200):
        self.requests: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.paths.append(self.path)
                receiver.requests.append(ExportMetricsServiceRequest.FromString(body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def metrics(self) -> dict[str, list]:
        found: dict[str, list] = {}
        for request in self.requests:
            for resource_metrics in request.resource_metrics:
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        found.setdefault(metric.name, []).append(metric)
        return found

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made: list[OTLPReceiver] = []

    def make(status: int = 200) -> OTLPReceiver:
        made.append(OTLPReceiver(status))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def attributes(point) -> dict[str, str]:
    return {a.key: a.value.string_value for a in point.attributes}


def test_push_carries_catalog_metrics_with_their_labels(receiver):
    otlp = receiver()
    sim = SimBackend(2, node="n1")
    sim.set_load(0, compute=0.3, bandwidth=0.85)
    exporter = GPUExporter(sim, "n1", interval_seconds=60)
    exporter.sampler.sample_once()
    exporter.push_otlp(otlp.url, "http", interval_seconds=3600)
    try:
        assert exporter.flush_otlp()
        metrics = otlp.metrics()
        assert otlp.paths[0] == "/v1/metrics"
        resource = {a.key: a.value.string_value for a in otlp.requests[0].resource_metrics[0].resource.attributes}
        assert resource["service.name"] == "infersight-gpu-collector" and resource["host.name"] == "n1"

        (bandwidth,) = metrics[gpu.MEMORY_BANDWIDTH_UTILIZATION.name]
        assert bandwidth.unit == "1"
        points = {attributes(p)["gpu"]: p for p in bandwidth.gauge.data_points}
        assert points["0"].as_double == pytest.approx(0.85)
        assert attributes(points["0"]) == {"node": "n1", "gpu": "0", "uuid": sim.devices()[0].uuid,
                                           "gpu_model": "H100-SXM", "source": "gpm"}
        (energy,) = metrics[gpu.ENERGY.name]
        assert energy.sum.is_monotonic and energy.unit == "J"
        assert len(energy.sum.data_points) == 2
        assert {attributes(p)["gpu"] for p in metrics[gpu.UP.name][0].gauge.data_points} == {"0", "1"}

        # The export result is counted in the exporter's own health.
        series = {(s.name, labels): v for s, labels, v in all_series(exporter.sampler, sim, "n1", exporter.health)}
        assert series[(gpu.COLLECTOR_OTLP_EXPORTS.name, ("n1", "success"))] == 1
    finally:
        exporter.stop()


def test_a_refused_export_is_counted_as_failure(receiver):
    otlp = receiver(status=400)
    exporter = GPUExporter(SimBackend(1), "n1", interval_seconds=60)
    exporter.sampler.sample_once()
    exporter.push_otlp(otlp.url, "http", interval_seconds=3600)
    try:
        exporter.flush_otlp()
        assert exporter.health.otlp_exports == {"failure": 1}
    finally:
        exporter.stop()


def test_endpoint_forms():
    assert metrics_url("http://127.0.0.1:4318", "http") == "http://127.0.0.1:4318/v1/metrics"
    assert metrics_url("http://127.0.0.1:4318/", "http") == "http://127.0.0.1:4318/v1/metrics"
    assert metrics_url("http://gw/otlp/v1/metrics", "http") == "http://gw/otlp/v1/metrics"
    assert type(make_exporter("http://127.0.0.1:4317", "grpc")).__module__.endswith("grpc.metric_exporter")
    with pytest.raises(ValueError, match="http or grpc"):
        make_exporter("http://127.0.0.1:4317", "thrift")

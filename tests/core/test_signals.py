import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infersight import signals
from infersight.signals.catalog import Kind, Signal, validate_catalog


def test_catalog_is_valid_and_seeded():
    assert validate_catalog() == []
    names = set(signals.CATALOG)
    # The signals DESIGN 4 asks for, one per area.
    for expected in ("gpu_memory_bandwidth_utilization_ratio", "gpu_energy_joules_total", "gpu_xid_errors_total",
                     "llm_requests_waiting", "llm_kv_cache_usage_ratio", "llm_prefix_cache_hits_tokens_total",
                     "llm_time_to_first_token_seconds", "llm_gateway_queue_depth", "llm_instance_state",
                     "llm_retries_total", "infersight_pipeline_spool_bytes"):
        assert expected in names


def sig(name, kind=Kind.GAUGE, unit="", labels=(), buckets=()):
    return Signal(name, kind, unit, tuple(labels), "help", "test", tuple(buckets))


@pytest.mark.parametrize("bad, problem", [
    (sig("llm_requests", Kind.COUNTER), "must end in _total"),
    (sig("llm_latency_seconds", Kind.HISTOGRAM, "seconds"), "needs buckets"),
    (sig("llm-bad-name"), "not a valid Prometheus metric name"),
    (sig("llm:recorded"), "not a valid Prometheus metric name"),
    (sig("foo_up"), "must start with"),
    (sig("llm_up", labels=("request_id",)), "forbidden"),
    (sig("llm_wait", unit="seconds"), "must show in the name"),
    (sig("llm_x_seconds", Kind.HISTOGRAM, "seconds", buckets=(2, 1)), "strictly increasing"),
    (sig("llm_gauge_total"), "only counters end in _total"),
])
def test_validation_catches(bad, problem):
    problems = validate_catalog([bad])
    assert any(problem in p for p in problems), problems


def test_duplicates_are_caught():
    a = sig("llm_dup")
    assert any("duplicate" in p for p in validate_catalog([a, a]))
    with pytest.raises(ValueError, match="declared twice"):
        signals.catalog.declare("llm_requests_waiting", Kind.GAUGE, "", (), "x", "test")


def test_selectors():
    s = signals.gpu.MEMORY_BANDWIDTH_UTILIZATION
    assert s.select() == "gpu_memory_bandwidth_utilization_ratio"
    assert s.select(node="n1", gpu="=~0|1") == 'gpu_memory_bandwidth_utilization_ratio{node="n1",gpu=~"0|1"}'
    assert s.select(node='a"b') == 'gpu_memory_bandwidth_utilization_ratio{node="a\\"b"}'
    with pytest.raises(ValueError, match="no label"):
        s.select(instance="x")
    ttft = signals.request.TTFT
    assert ttft.quantile(0.95, ["model"]) == (
        "histogram_quantile(0.95, sum by (le, model) (rate(llm_time_to_first_token_seconds_bucket[5m])))")
    assert signals.request.RETRIES.rate("1m", model="m") == 'rate(llm_retries_total{model="m"}[1m])'
    with pytest.raises(ValueError):
        signals.gpu.POWER.rate()
    with pytest.raises(ValueError):
        signals.gpu.POWER.bucket()


def test_register_exposes_catalog_names():
    registry = CollectorRegistry()
    for s in (signals.request.TTFT, signals.request.RETRIES, signals.gateway.QUEUE_DEPTH):
        metric = s.register(registry)
        labels = {name: "x" for name in s.labels}
        if s.kind is Kind.HISTOGRAM:
            metric.labels(**labels).observe(0.3)
        elif s.kind is Kind.COUNTER:
            metric.labels(**labels).inc()
        else:
            metric.labels(**labels).set(4)
    text = generate_latest(registry).decode()
    exposed = {sample.name for fam in text_string_to_metric_families(text) for sample in fam.samples}
    assert {"llm_time_to_first_token_seconds_bucket", "llm_retries_total", "llm_gateway_queue_depth"} <= exposed
    assert 'le="0.25"' in text


def test_one_instance_label_on_every_per_instance_signal():
    """DESIGN 10: engine, request and gateway-health series name an engine instance by the same
    label, so one `on (instance)` joins them; no signal keeps the old `target` label."""
    per_instance = [s for s in signals.all_signals() if s.producer.startswith(("collectors.engine", "instrumentation"))
                    and ("model" in s.labels or s.name == signals.engine.UP.name)]
    assert signals.engine.REQUESTS_WAITING in per_instance and signals.request.TTFT in per_instance
    assert signals.gateway.EJECTIONS in per_instance and signals.engine.GPU_INFO in per_instance
    missing = [s.name for s in per_instance if "instance" not in s.labels and s.name != signals.engine.UP.name]
    # The gateway's queue is in front of every instance; timelines are counted per model.
    assert sorted(missing) == sorted([signals.gateway.QUEUE_DEPTH.name, signals.request.TIMELINES_KEPT.name,
                                     signals.request.TIMELINES_TRUNCATED.name])
    assert "instance" in signals.engine.UP.labels
    assert [s.name for s in signals.all_signals() if "target" in s.labels] == []

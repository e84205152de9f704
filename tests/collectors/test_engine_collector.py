"""The collector against local HTTP targets: good, slow, trickling, garbage, failing, huge, vanishing."""

from __future__ import annotations

import json
import os

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infersight.collectors.engine.collector import EngineCollector
from infersight.collectors.engine.targets import Target, TargetError
from infersight.signals import engine as sig
from tests.collectors.engine_server import EngineServer
from tests.conftest import FIXTURES

VLLM = (FIXTURES / "metrics" / "vllm_metrics_sample.txt").read_text()
SGLANG = (FIXTURES / "metrics" / "sglang_metrics_sample.txt").read_text()


@pytest.fixture
def server():
    srv = EngineServer()
    yield srv
    srv.stop()


def exposition(collector: EngineCollector) -> dict[str, list]:
    """Scrape the collector through a registry, as Prometheus would, and parse it back."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def by_target(samples, name: str) -> dict[str, float]:
    return {s.labels["instance"]: s.value for s in samples.get(name, [])}


def test_each_failure_is_isolated_and_reported(server):
    targets = [
        Target(server.add("/vllm", VLLM), engine="vllm", instance="good-vllm", pool="stable", node="n1", gpu="0"),
        Target(server.add("/sglang", SGLANG), instance="good-sglang"),  # engine auto-detected
        Target(server.add("/slow", VLLM, delay=5), instance="slow"),
        Target(server.add("/trickle", VLLM, trickle=0.05), instance="trickle"),
        Target(server.add("/garbage", "<html>oops</html>"), instance="garbage"),
        Target(server.add("/error", "internal error", status=500), instance="http500"),
        Target(server.add("/huge", VLLM * 20), instance="huge"),
        Target(server.add("/binary", b"\xff\xfe\x00garbage"), instance="binary"),
        Target(server.add("/node", "# TYPE node_load1 gauge\nnode_load1 1\n"), instance="not-an-engine"),
        Target("http://127.0.0.1:1/metrics", instance="refused"),
    ]
    collector = EngineCollector(targets, timeout=1.0, max_bytes=len(VLLM) * 2)
    try:
        cycle = collector.run_cycle()
        reasons = {r.target.instance: r.reason for r in cycle.results}
        assert reasons == {"good-vllm": None, "good-sglang": None, "slow": "timeout", "trickle": "timeout",
                           "garbage": "malformed", "http500": "http_status", "huge": "too_large",
                           "binary": "malformed", "not-an-engine": "unrecognized", "refused": "down"}
        samples = exposition(collector)  # a second cycle, through the registry
    finally:
        collector.close()
    up = by_target(samples, sig.UP.name)
    assert up == {name: (1.0 if name.startswith("good") else 0.0) for name in reasons}
    engines = {s.labels["instance"]: s.labels["engine"] for s in samples[sig.UP.name]}
    assert engines["good-vllm"] == "vllm" and engines["good-sglang"] == "sglang" and engines["refused"] == "unknown"
    # Only the good targets have series; a failed target has none at all.
    for name, series in samples.items():
        if name.startswith("llm_") and not name.startswith(("llm_engine_up", "llm_engine_scrape")):
            assert {s.labels["instance"] for s in series} <= {"good-vllm", "good-sglang"}, name
    running = by_target(samples, sig.REQUESTS_RUNNING.name)
    assert running == {"good-vllm": 3.0, "good-sglang": 162.0}
    labels = next(s.labels for s in samples[sig.REQUESTS_RUNNING.name] if s.labels["instance"] == "good-vllm")
    assert (labels["pool"], labels["node"], labels["gpu"], labels["dp_rank"]) == ("stable", "n1", "0", "0")
    errors = {(s.labels["instance"], s.labels["reason"]): s.value for s in samples[sig.SCRAPE_ERRORS.name]}
    assert errors[("slow", "timeout")] == 2 and errors[("refused", "down")] == 2  # two cycles
    # Every reason exists at 0 for every target from its first cycle (DESIGN 8): good ones too.
    assert {errors[("good-vllm", reason)] for reason in sig.SCRAPE_ERROR_REASONS} == {0}
    assert errors[("slow", "down")] == 0 and set(errors) == {(t, r) for t in reasons for r in sig.SCRAPE_ERROR_REASONS}
    assert samples[sig.TARGETS.name][0].value == len(targets)
    # Only a live target with node and gpu configured gets its GPU-join series.
    assert [(s.labels["instance"], s.labels["node"], s.labels["gpu"], s.labels["model"])
            for s in samples[sig.GPU_INFO.name]] == [("good-vllm", "n1", "0", "Qwen/Qwen3-8B")]
    assert set(by_target(samples, sig.SCRAPE_DURATION.name)) == set(reasons)


def test_a_target_that_disappears_loses_its_series(server):
    vanishing = EngineServer()
    targets = [Target(server.add("/vllm", VLLM), instance="stays"),
               Target(vanishing.add("/vllm", VLLM), instance="goes")]
    collector = EngineCollector(targets, timeout=1)
    try:
        first = exposition(collector)
        assert by_target(first, sig.KV_CACHE_USAGE.name) == {"stays": 0.1875, "goes": 0.1875}
        vanishing.stop()
        second = exposition(collector)
    finally:
        collector.close()
    assert by_target(second, sig.UP.name) == {"stays": 1.0, "goes": 0.0}
    assert by_target(second, sig.KV_CACHE_USAGE.name) == {"stays": 0.1875}
    ttft = {s.labels["instance"] for s in second[sig.TTFT.name + "_bucket"]}
    assert ttft == {"stays"}
    # The engine label of `up` stays what it was while the target was healthy.
    assert {s.labels["engine"] for s in second[sig.UP.name]} == {"vllm"}
    errors = {(e.labels["instance"], e.labels["reason"]): e.value for e in second[sig.SCRAPE_ERRORS.name]}
    assert {k: v for k, v in errors.items() if v} == {("goes", "down"): 1.0}
    assert errors[("stays", "down")] == 0  # there at 0 before any failure


def test_file_sd_is_reloaded_when_it_changes(server, tmp_path):
    server.add("/metrics", VLLM)
    other = EngineServer()
    other.add("/metrics", SGLANG)
    sd = tmp_path / "engines.json"

    def write(groups) -> None:
        sd.write_text(json.dumps(groups))
        os.utime(sd, ns=(sd.stat().st_mtime_ns + 10**9,) * 2)  # a visible change even within one mtime tick

    write([{"targets": [f"127.0.0.1:{server.port}"], "labels": {"engine": "vllm", "pool": "canary", "job": "x"}}])
    static = Target(other.url("/metrics"), instance="static")
    collector = EngineCollector([static], file_sd=str(sd), timeout=1)
    try:
        first = exposition(collector)
        assert by_target(first, sig.UP.name) == {"static": 1.0, f"127.0.0.1:{server.port}": 1.0}
        pools = {s.labels["pool"] for s in first[sig.REQUESTS_RUNNING.name]}
        assert pools == {"", "canary"}

        write([{"targets": [f"127.0.0.1:{other.port}"], "labels": {"pool": "stable"}}])
        second = exposition(collector)
        assert by_target(second, sig.UP.name) == {"static": 1.0, f"127.0.0.1:{other.port}": 1.0}

        sd.write_text("{not json")
        os.utime(sd, ns=(sd.stat().st_mtime_ns + 2 * 10**9,) * 2)
        third = exposition(collector)  # a broken file keeps the last good targets
        assert by_target(third, sig.UP.name) == by_target(second, sig.UP.name)
        reloads = {s.labels["result"]: s.value for s in third[sig.FILE_SD_RELOADS.name]}
        assert reloads == {"success": 2.0, "error": 1.0}
        assert collector.file_sd.last_error and "not valid JSON" in collector.file_sd.last_error

        sd.unlink()  # a removed file removes its targets, as in Prometheus
        assert by_target(exposition(collector), sig.UP.name) == {"static": 1.0}
    finally:
        collector.close()
        other.stop()


def test_file_sd_without_changes_is_not_reparsed(server, tmp_path):
    sd = tmp_path / "sd.json"
    sd.write_text(json.dumps([{"targets": [f"127.0.0.1:{server.port}"]}]))
    server.add("/metrics", VLLM)
    collector = EngineCollector(file_sd=str(sd), timeout=1)
    try:
        collector.run_cycle()
        collector.run_cycle()
        assert collector._file_sd_reloads == {"success": 1}
    finally:
        collector.close()


def test_duplicate_static_instances_are_refused():
    with pytest.raises(TargetError, match="two targets with instance .x."):
        EngineCollector([Target("http://a:1/metrics", instance="x"), Target("http://b:1/metrics", instance="x")])


def test_our_exposition_is_strict_openmetrics_whatever_the_engines_send(server):
    """Prometheus negotiates OpenMetrics from prometheus_client: one engine's malformed histogram
    must not make the whole collector unreadable to a strict parser."""
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_parse

    fixtures = sorted(p for p in (FIXTURES / "metrics").glob("*.txt") if not p.name.startswith("dcgm"))
    targets = [Target(server.add(f"/{p.stem}", p.read_text()), instance=p.stem) for p in fixtures]
    collector = EngineCollector(targets, timeout=2)
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        families = list(openmetrics_parse(openmetrics_latest(registry).decode()))
    finally:
        collector.close()
    up = {s.labels["instance"]: s.value for f in families if f.name == sig.UP.name for s in f.samples}
    assert up == {p.stem: 1.0 for p in fixtures}


def test_state_changes_are_logged_once(server, caplog):
    url = server.add("/flaky", VLLM)
    collector = EngineCollector([Target(url, instance="flaky")], timeout=1)
    try:
        with caplog.at_level("WARNING", logger="infersight.collectors.engine.collector"):
            collector.run_cycle()
            server.routes["/flaky"].status = 503
            collector.run_cycle()
            collector.run_cycle()
            server.routes["/flaky"].status = 200
            collector.run_cycle()
    finally:
        collector.close()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "flaky" in messages[0] and "http_status" in messages[0] and "503" in messages[0]
    assert "recovered" in messages[1]

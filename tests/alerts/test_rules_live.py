"""The generated rules loaded by a real Prometheus, evaluated against real exposition of every signal."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from infersight.alerts import recording as rec
from infersight.signals import CATALOG, Kind
from tests.conftest import free_port


@pytest.fixture
def exporter():
    """Every catalog signal with one series, served by prometheus_client as our exporters do."""
    registry = CollectorRegistry()
    for signal in CATALOG.values():
        metric = signal.register(registry)
        child = metric.labels(**{label: "x" for label in signal.labels}) if signal.labels else metric
        if signal.kind is Kind.HISTOGRAM:
            child.observe(0.5)
        elif signal.kind is Kind.COUNTER:
            child.inc(1)
        else:
            child.set(1)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    yield f"127.0.0.1:{port}"
    server.shutdown()
    thread.join(timeout=5)


def test_prometheus_loads_and_evaluates_every_rule(default_build, exporter, prometheus_server):
    prom = prometheus_server([exporter], rule_files=[str(p) for p in default_build.rule_files])
    prom.wait_for(rec.GATEWAY_QUEUE_SUM)  # scraped and recorded
    time.sleep(3)  # a few more evaluations, so rates have two samples
    with urllib.request.urlopen(prom.url + "/api/v1/rules", timeout=5) as response:
        groups = json.load(response)["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(groups) == len(default_build.rule_files)
    assert len(rules) == default_build.alert_count + default_build.recording_count
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert broken == []
    # recorded from live data: sums, ratios and quantiles
    assert prom.query(rec.GATEWAY_QUEUE_SUM)[0]["value"][1] == "1"
    assert prom.query(rec.INSTANCE_QUEUE_SUM)[0]["metric"]["instance"] == "x"
    assert prom.wait_for(rec.TTFT_P99_BY_INSTANCE, timeout=10)

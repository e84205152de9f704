"""The generated Alertmanager config, checked and routed by the real amtool."""

from __future__ import annotations

import pytest
import yaml

from infersight.alerts import tools
from infersight.alerts.rules import all_alerts
from infersight.config import parse_config
from infersight.thresholds import thresholds_from_config
from tests.alerts.conftest import PAGERDUTY_KEY, SLACK_URL
from tests.conftest import require_tool

# signal -> receivers before the severity routes (they `continue`)
FIRST = {"scale_out": ["autoscaler"], "circuit_breaker": ["gateway"]}
WITH_SECRETS = {"critical": "pagerduty", "warning": "slack", "info": "null"}
WITHOUT_SECRETS = {"critical": "ticket", "warning": "ticket", "info": "null"}
SIGNALS = ("scale_out", "circuit_breaker", "overload", "slo", "gpu", "cache", "pipeline")


@pytest.mark.real
def test_amtool_check_config_is_clean(default_build, custom_build):
    require_tool("amtool")
    for built, receivers in ((default_build, 4), (custom_build, 6)):
        result = tools.check_alertmanager(built.alertmanager)
        assert result.ok, result.output
        assert f"{receivers} receivers" in result.output and "3 inhibit rules" in result.output


@pytest.mark.parametrize("severity", ["critical", "warning", "info"])
@pytest.mark.parametrize("signal", SIGNALS)
@pytest.mark.real
def test_routes_by_signal_and_severity(custom_build, signal, severity):
    require_tool("amtool")
    got = tools.route_receivers(custom_build.alertmanager, {"signal": signal, "severity": severity,
                                                            "alertname": "X", "cluster": "prod-eu"})
    assert got == [*FIRST.get(signal, []), WITH_SECRETS[severity]]


@pytest.mark.real
def test_every_generated_alert_routes_as_its_labels_say(default_build):
    """Without secret files, pages and warnings fall back to the ticket webhook; automation still runs."""
    require_tool("amtool")
    limits = thresholds_from_config(parse_config({}))
    seen = set()
    for alert in all_alerts(limits):
        key = (alert.signal.value, alert.severity.value)
        if key in seen:
            continue
        seen.add(key)
        got = tools.route_receivers(default_build.alertmanager, alert.static_labels(limits.cluster))
        assert got == [*FIRST.get(key[0], []), WITHOUT_SECRETS[key[1]]], alert.name


@pytest.mark.real
def test_alerts_without_severity_still_reach_someone(default_build):
    require_tool("amtool")
    assert tools.route_receivers(default_build.alertmanager, {"alertname": "Unlabelled"}) == ["ticket"]


def test_secrets_are_referenced_by_file_never_written(custom_build):
    text = custom_build.alertmanager.read_text()
    assert PAGERDUTY_KEY not in text and SLACK_URL not in text
    config = yaml.safe_load(text)
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers["pagerduty"]["pagerduty_configs"][0]["routing_key_file"].endswith("pagerduty.key")
    assert receivers["slack"]["slack_configs"][0]["api_url_file"].endswith("slack.url")
    assert receivers["slack"]["slack_configs"][0]["channel"] == "#infer-prod"


def test_inhibitions_name_existing_alerts(default_build):
    config = yaml.safe_load(default_build.alertmanager.read_text())
    names = {a.name for a in all_alerts(thresholds_from_config(parse_config({})))}
    for rule in config["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            label, _, value = matcher.partition("=")
            if label == "alertname":
                assert set(value.lstrip("~").strip('"').split("|")) <= names, matcher


@pytest.mark.real
def test_cold_start_thrash_and_cascade_route_apart(custom_build):
    """Cold start vs cascade: the thrash tickets the gateway webhook and Slack (slow-start the new
    instances); the cascade pages. A cascade silences per-instance latency only in its own pool."""
    require_tool("amtool")
    limits = thresholds_from_config(parse_config({}))
    alerts = {a.name: a for a in all_alerts(limits)}
    labels = {"cluster": "prod-eu", "model": "m1", "pool": "stable"}
    thrash = {**alerts["LLMColdStartThrash"].static_labels("prod-eu"), **labels, "instance": "10.0.1.17:8000",
              "alertname": "LLMColdStartThrash"}
    cascade = {**alerts["LLMEjectionCascade"].static_labels("prod-eu"), **labels, "alertname": "LLMEjectionCascade"}
    assert tools.route_receivers(custom_build.alertmanager, thrash) == ["gateway", "slack"]
    assert tools.route_receivers(custom_build.alertmanager, cascade) == ["gateway", "pagerduty"]
    rules = yaml.safe_load(custom_build.alertmanager.read_text())["inhibit_rules"]
    from_cascade = next(r for r in rules if r["source_matchers"] == ['alertname="LLMEjectionCascade"'])
    assert from_cascade["equal"] == ["cluster", "model", "pool"]

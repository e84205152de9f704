"""Alertmanager configuration: receivers, the route tree by signal and severity, and inhibitions.

Routing, first match wins unless ``continue``:
  signal=scale_out        -> autoscaler webhook, continue (people still hear about it by severity)
  signal=circuit_breaker  -> gateway webhook, continue (it half-opens breakers; critical ones page too)
  severity=critical       -> PagerDuty (or the ticket webhook when no routing key file is configured)
  severity=warning        -> Slack (or the ticket webhook when no Slack URL file is configured)
  severity=info           -> nobody (dashboards only)
Secrets are never written into the file: PagerDuty and Slack read theirs from files at run time.
"""

from __future__ import annotations

from collections.abc import Sequence

from infersight.alerts.model import Alert, Severity, SignalClass
from infersight.config import Config

# Per-instance latency alerts that an ejection cascade explains (and so silences) in its pool.
# The cascade counts instances in their cold start apart, so a cold-start thrash (new instances
# ejected while warming up) never raises it and stays visible.
PER_INSTANCE_LATENCY = ("LLMInstanceTTFTP99High", "LLMColdStartThrash")
CASCADE = "LLMEjectionCascade"
FLEET_OVERLOAD, INSTANCE_OVERLOAD = "LLMFleetOverloaded", "LLMInstanceOverloaded"
# Labels that identify "the same alert" for critical-over-warning inhibition; absent ones match.
SAME_ALERT = ["alertname", "cluster", "model", "pool", "instance", "node", "gpu"]


def _webhook(name: str, url: str) -> dict:
    return {"name": name, "webhook_configs": [{"url": url, "send_resolved": True}]}


def receivers(config: Config) -> tuple[list[dict], str, str]:
    """The receivers, and the names critical and warning alerts go to."""
    am = config.alertmanager
    result = [
        {"name": "null"},
        _webhook("autoscaler", am.autoscaler_webhook_url),
        _webhook("gateway", am.gateway_webhook_url),
        _webhook("ticket", am.ticket_webhook_url),
    ]
    critical = warning = "ticket"
    if am.pagerduty_routing_key_file:
        result.append({"name": "pagerduty", "pagerduty_configs": [{
            "routing_key_file": am.pagerduty_routing_key_file,
            "severity": "critical",
            "description": '{{ .CommonLabels.alertname }}: {{ .CommonAnnotations.summary }}',
            "send_resolved": True,
        }]})
        critical = "pagerduty"
    if am.slack_api_url_file:
        result.append({"name": "slack", "slack_configs": [{
            "api_url_file": am.slack_api_url_file,
            "channel": am.slack_channel,
            "title": '[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }} ({{ .CommonLabels.cluster }})',
            "text": '{{ range .Alerts }}{{ .Annotations.description }}\n<{{ .Annotations.runbook_url }}|runbook>\n'
                    '{{ end }}',
            "send_resolved": True,
        }]})
        warning = "slack"
    return result, critical, warning


def routes(critical: str, warning: str) -> dict:
    return {
        "receiver": "ticket",  # anything without a known severity still reaches someone
        "group_by": ["cluster", "alertname", "model"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "4h",
        "routes": [
            {"receiver": "autoscaler", "matchers": [f'signal="{SignalClass.SCALE_OUT}"'],
             "group_by": ["cluster", "model", "pool", "alertname"],
             "group_wait": "10s", "group_interval": "1m", "repeat_interval": "15m", "continue": True},
            {"receiver": "gateway", "matchers": [f'signal="{SignalClass.CIRCUIT_BREAKER}"'],
             "group_by": ["cluster", "model", "instance", "alertname"],
             "group_wait": "5s", "group_interval": "1m", "repeat_interval": "15m", "continue": True},
            {"receiver": critical, "matchers": [f'severity="{Severity.CRITICAL}"'],
             "group_by": ["cluster", "alertname", "model", "node"], "repeat_interval": "1h"},
            {"receiver": warning, "matchers": [f'severity="{Severity.WARNING}"']},
            {"receiver": "null", "matchers": [f'severity="{Severity.INFO}"']},
        ],
    }


def inhibit_rules(alerts: Sequence[Alert]) -> list[dict]:
    names = {a.name for a in alerts}
    for needed in (*PER_INSTANCE_LATENCY, CASCADE, FLEET_OVERLOAD, INSTANCE_OVERLOAD):
        if needed not in names:  # a renamed alert must not leave an inhibition pointing at nothing
            raise ValueError(f"inhibition refers to {needed}, which is not among the alerts")
    return [
        {"source_matchers": [f'alertname="{CASCADE}"'],
         "target_matchers": [f'alertname=~"{"|".join(PER_INSTANCE_LATENCY)}"'],
         "equal": ["cluster", "model", "pool"]},
        {"source_matchers": [f'alertname="{FLEET_OVERLOAD}"'],
         "target_matchers": [f'alertname="{INSTANCE_OVERLOAD}"'],
         "equal": ["cluster", "model"]},
        {"source_matchers": [f'severity="{Severity.CRITICAL}"'],
         "target_matchers": [f'severity="{Severity.WARNING}"'],
         "equal": SAME_ALERT},
    ]


def alertmanager_config(config: Config, alerts: Sequence[Alert]) -> dict:
    receiver_list, critical, warning = receivers(config)
    return {
        "global": {"resolve_timeout": "5m"},
        "route": routes(critical, warning),
        "inhibit_rules": inhibit_rules(alerts),
        "receivers": receiver_list,
    }

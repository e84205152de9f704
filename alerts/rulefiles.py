"""Prometheus rule files: one recording group, one alerting group per signal module."""

from __future__ import annotations

from infersight.alerts.model import Alert, Recording
from infersight.thresholds import Thresholds


def runbook_url(limits: Thresholds, alert: Alert) -> str:
    return f"{limits.runbook_base_url}/{alert.name}.md"


def annotations(limits: Thresholds, alert: Alert) -> dict[str, str]:
    return {"summary": alert.summary, "description": alert.description, "runbook_url": runbook_url(limits, alert)}


def alert_rule(limits: Thresholds, alert: Alert) -> dict:
    rule = {"alert": alert.name, "expr": alert.expr}
    if alert.for_ not in ("0m", "0s", ""):
        rule["for"] = alert.for_
    rule["labels"] = alert.static_labels(limits.cluster)
    rule["annotations"] = annotations(limits, alert)
    return rule


def recording_file(recordings: list[Recording]) -> dict:
    rules = [{"record": r.record, "expr": r.expr} for r in recordings]
    return {"groups": [{"name": "infersight.recording", "rules": rules}]}


def alert_file(limits: Thresholds, group: str, alerts: list[Alert]) -> dict:
    return {"groups": [{"name": f"infersight.{group}", "rules": [alert_rule(limits, a) for a in alerts]}]}

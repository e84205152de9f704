"""Prometheus rule files: one recording group, one alerting group per signal module."""

from __future__ import annotations

import re

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


def recordings_read_by(recordings: list[Recording], exprs: list[str]) -> list[Recording]:
    """The recording rules ``exprs`` read, directly or through other recording rules, in their order.

    A promtool test file loads only these with its alerts: promtool evaluates every loaded rule at every
    step, and the whole recording group (over a fleet's histograms) was most of a test's CPU. The values
    are the same, as each rule reads only rules that come before it in the group.
    """
    names = {r.record for r in recordings}
    token = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
    wanted: set[str] = set()
    todo = list(exprs)
    by_name = {r.record: r for r in recordings}
    while todo:
        for name in set(token.findall(todo.pop())) & names - wanted:
            wanted.add(name)
            todo.append(by_name[name].expr)
    return [r for r in recordings if r.record in wanted]


def alert_file(limits: Thresholds, group: str, alerts: list[Alert]) -> dict:
    return {"groups": [{"name": f"infersight.{group}", "rules": [alert_rule(limits, a) for a in alerts]}]}

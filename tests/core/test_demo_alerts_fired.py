"""The demo's alert table reads when an alert first fired from the ALERTS samples as Prometheus stored them."""

import json
import time

import pytest

from infersight.commands.demo_summary import alerts_fired
from tests.conftest import require_tool


@pytest.mark.real
def test_an_alert_fires_at_the_evaluation_that_fired_it(prometheus_server, tmp_path):
    require_tool("prometheus")
    rules = tmp_path / "rules.yml"
    rules.write_text(json.dumps({"groups": [{"name": "g", "rules": [
        {"alert": "AlwaysFiring", "expr": "vector(1)", "labels": {"severity": "warning", "model": "m"}}]}]}))
    prom = prometheus_server([], rule_files=[str(rules)])
    prom.wait_for('ALERTS{alertstate="firing", alertname="AlwaysFiring"}')
    time.sleep(2.2)  # a few more evaluations, so a range query's steps would have samples to round to
    # The evaluations that wrote a firing sample, as stored: the first of them is when it fired.
    stored = prom.query('ALERTS{alertstate="firing", alertname="AlwaysFiring"}[1m]')[0]["values"]
    fired_at = min(float(t) for t, _v in stored)
    # From half a second before it fired: a range query with a 1 s step would say fired_at + 0.5.
    rows = alerts_fired(prom.url, lambda ts: ts, fired_at - 0.5, time.time())
    assert [(r["alert"], r["severity"], r["series"], r["example"]) for r in rows] == [
        ("AlwaysFiring", "warning", 1, {"model": "m"})]
    assert rows[0]["first_ts"] == fired_at
    # A window that starts after it fired reports the first sample inside the window, not before it.
    later = fired_at + 1.5
    assert alerts_fired(prom.url, lambda ts: ts, later, time.time())[0]["first_ts"] >= later

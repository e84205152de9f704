"""The alert-quality test: every scenario's series through our generated rules, in promtool.

For each scenario the expected alerts must fire by their deadline (minutes after onset), and no
other alert may fire at warning or above; the healthy baseline fires none. An expectation our rules
miss today for a known rule defect is a strict xfail naming the rule: it turns into a failure the
moment the rule is fixed, so the mark cannot outlive the defect. An alert that fires where it must
not has no such mark: fix the rule, or say in the scenario's may_fire why the incident calls for it.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from infersight.alerts.build import render_rules
from infersight.config import Config
from infersight.simulator import quality
from tests.conftest import require_tool
from tests.simulator.runs import SCENARIOS, verdict

pytestmark = pytest.mark.real
README = Path(__file__).resolve().parents[2] / "simulator" / "README.md"
TABLE_START, TABLE_END = "<!-- alert-quality table: start -->", "<!-- alert-quality table: end -->"


@functools.cache
def result(name: str) -> quality.Result:
    require_tool("promtool")
    return verdict(name)


def _expectations():
    for name, scenario in SCENARIOS.items():
        for e in scenario.expect:
            marks = [pytest.mark.xfail(strict=True, reason=e.known_failure)] if e.known_failure else []
            yield pytest.param(name, e.alert, e.severity.value, id=f"{name}-{e.alert}-{e.severity.value}",
                               marks=marks)


@pytest.mark.parametrize(("name", "alert", "severity"), list(_expectations()))
def test_expected_alert_fires_by_its_deadline(name, alert, severity):
    r = result(name)
    row = next(row for row in r.rows if row.expected and (row.alert, row.severity) == (alert, severity))
    assert row.fired_minute is not None, f"{alert} [{severity}] never fired in {name}; fired: {r.first_fired}"
    assert row.fired_minute <= row.deadline_minute, (
        f"{alert} [{severity}] fired at +{row.after_onset:g} min, deadline +{row.deadline_minute - row.onset_minute:g}")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_nothing_else_fires_at_warning_or_above(name):
    r = result(name)
    extra = [f"{row.alert} [{row.severity}] at minute {row.fired_minute:g}" for row in r.rows
             if not row.expected and not row.allowed and row.fired_minute is not None]
    assert not extra, f"{name}: unexpected alerts: {', '.join(extra)}"


def test_the_healthy_baseline_is_six_hours_and_expects_nothing():
    s = SCENARIOS["healthy-baseline"]
    assert s.minutes >= 360 and not s.expect
    assert any(e.action == "restart" for e in s.events)


def test_readme_table_is_the_current_one():
    table = quality.table([result(name) for name in SCENARIOS])
    print("\n" + table)
    text = README.read_text()
    kept = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    stale = ("simulator/README.md's alert-quality table is out of date; regenerate it with "
             "'infersight simulate --check' and paste the table between the markers")
    assert kept == table, stale


def test_promtool_evaluates_the_recording_group_before_the_alerts():
    """Without an order promtool evaluates groups at random, and an alert reading a recording fires a
    minute apart from run to run."""
    texts = list(render_rules(Config()).values())
    order = quality.group_eval_order(texts)
    groups = [g for t in texts for g in yaml.safe_load(t)["groups"]]
    recording = [g["name"] for g in groups if g["rules"] and all("record" in r for r in g["rules"])]
    assert recording and sorted(order) == sorted(g["name"] for g in groups)
    assert order[:len(recording)] == recording

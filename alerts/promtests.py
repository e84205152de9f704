"""promtool unit-test files generated from the cases each alert carries.

Every case is one test group evaluated at one moment; its expected alerts carry the complete label
set and the annotations rendered here (see :mod:`infersight.alerts.templates`), so promtool checks
both the firing logic and every word an on-call engineer will read.

Every case whose input has counters runs twice: as written (counters created at 0, as our
producers do) and as a *twin* whose counters are absent until their first event and then start at
their first value, as any producer that does not create its label sets in advance exposes them
(DESIGN 8). Both must give the same verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from infersight.alerts.model import Alert, Case, Expected
from infersight.alerts.rulefiles import annotations
from infersight.alerts.series import absent_until_first_event
from infersight.alerts.templates import check_clear_of_rounding, render
from infersight.thresholds import Thresholds


def expected_alert(limits: Thresholds, owner: Alert, expected: Expected) -> dict:
    alert = expected.alert or owner
    labels = {**expected.labels, **alert.static_labels(limits.cluster)}
    check_clear_of_rounding(alert.description, expected.value)
    notes = annotations(limits, alert)
    notes["description"] = render(alert.description, labels, expected.value)
    return {"exp_labels": labels, "exp_annotations": notes}


TWIN_SUFFIX = " (counters absent until their first event)"


def twin(case: Case) -> Case | None:
    """The case with counters absent until their first event; None when it has no counter."""
    series = absent_until_first_event(case.series)
    if list(series) == list(case.series):
        return None
    return dataclasses.replace(case, name=case.name + TWIN_SUFFIX, series=series)


def test_group(limits: Thresholds, alert: Alert, case: Case) -> dict:
    verdict = "fires" if case.fires else "silent"
    return {
        "name": f"{alert.name} [{alert.severity}] {verdict}: {case.name}",
        "interval": "1m",
        "input_series": [{"series": s.selector, "values": s.values} for s in case.series],
        "alert_rule_test": [{
            "eval_time": f"{case.at_minutes}m",
            "alertname": alert.name,
            "exp_alerts": [expected_alert(limits, alert, e) for e in case.fires],
        }] + [{"eval_time": f"{m}m", "alertname": alert.name, "exp_alerts": []} for m in case.quiet_at],
    }


def _fires_itself(case: Case) -> bool:
    """Whether the case's own alert fires (a sibling firing in its place does not count)."""
    return any(e.alert is None for e in case.fires)


def test_file(limits: Thresholds, alerts: Sequence[Alert], rule_files: Sequence[str]) -> dict:
    missing = [f"{a.name} [{a.severity}]" for a in alerts
               if not any(_fires_itself(c) for c in a.cases) or all(_fires_itself(c) for c in a.cases)]
    if missing:
        raise ValueError(f"every alert needs a firing and a silent case; incomplete: {', '.join(missing)}")
    return {
        "rule_files": list(rule_files),
        "evaluation_interval": "1m",
        "tests": [test_group(limits, alert, c) for alert in alerts for case in alert.cases
                  for c in (case, twin(case)) if c is not None],
    }

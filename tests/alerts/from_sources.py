"""promtool cases whose input series come from a source's normalizer, minute by minute.

Each minute is a list of catalog series (signal, label values, value) as a collector produced them
from that minute's exposition; the series become promtool input (``_`` where a series is absent that
minute) and the generated alert rules run over them. So an alert is proven to fire on what the source
mapping really emits, names and labels included, not on series written for the rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from infersight.alerts import tools
from infersight.alerts.build import recording_rules_for_tests, render_rules
from infersight.alerts.model import Alert, Expected, Series
from infersight.alerts.promtests import expected_alert
from infersight.alerts.recording import recording_rules
from infersight.alerts.rules import alerts_by_file, all_alerts
from infersight.config import parse_config
from infersight.signals.catalog import Signal
from infersight.thresholds import thresholds_from_config

SourceSeries = tuple[Signal, Sequence[str], float]


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def input_series(minutes: Sequence[Iterable[SourceSeries]]) -> list[Series]:
    by_selector: dict[str, list[str]] = {}
    for minute, series in enumerate(minutes):
        for signal, values, value in series:
            selector = signal.select(**dict(zip(signal.labels, values, strict=True)))
            column = by_selector.setdefault(selector, ["_"] * len(minutes))
            column[minute] = _num(value)
    return [Series(selector, " ".join(values)) for selector, values in by_selector.items()]


def alert(name: str, severity: str | None = None) -> Alert:
    limits = thresholds_from_config(parse_config({}))
    found = [a for a in all_alerts(limits) if a.name == name and (severity is None or a.severity == severity)]
    assert len(found) == 1, f"{name} [{severity}]: {len(found)} rules"
    return found[0]


def run_cases(tmp_path: Path, cases: Sequence[tuple[str, Alert, Sequence[Series], int, Sequence[Expected]]]):
    """Run promtool over the default rules with these cases: (name, alert, series, eval minute, fires)."""
    config = parse_config({})
    limits = thresholds_from_config(config)
    # the owners' rule files, and only the recording rules they read, as `alerts build` writes its tests
    owners = {owner.name for _, owner, *_ in cases}
    groups = [g for g, alerts in alerts_by_file(limits).items() if owners & {a.name for a in alerts}]
    rules = render_rules(config)
    read = recording_rules_for_tests(recording_rules(limits), [a for a in all_alerts(limits) if a.name in owners])
    (tmp_path / "rules").mkdir(parents=True, exist_ok=True)
    rule_files = [tmp_path / "rules" / f"{g}.yml" for g in groups]
    for g, path in zip(groups, rule_files, strict=True):
        path.write_text(rules[f"rules/{g}.yml"])
    if read:
        rule_files.insert(0, tmp_path / "rules" / "recording.yml")
        rule_files[0].write_text(read)
    tests = [{
        "name": name,
        "interval": "1m",
        "input_series": [{"series": s.selector, "values": s.values} for s in series],
        "alert_rule_test": [{"eval_time": f"{at}m", "alertname": owner.name,
                             "exp_alerts": [expected_alert(limits, owner, e) for e in fires]}],
    } for name, owner, series, at, fires in cases]
    test_file = tmp_path / "from_sources_test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(p) for p in rule_files],
                                         "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    return tools.test_rules([test_file])

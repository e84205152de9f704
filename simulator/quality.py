"""The alert-quality check: our generated rules, evaluated by promtool over a scenario's series.

promtool's rule unit tests evaluate every rule at every minute over the input series and store
the ``ALERTS`` series like Prometheus does. One PromQL probe at the end asks when each alert first
fired: ``min_over_time(timestamp(ALERTS{alertstate="firing"})[...])``. The probe expects nothing,
so promtool reports what it got; that report (values printed exactly, in Go's shortest 'E' form)
is the table: for each expected alert, the minute it fired after onset against its deadline, and
every other alert that fired at warning or above.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from infersight.alerts.build import render_rules
from infersight.alerts.tools import _binary
from infersight.alerts.yamlout import SafeDumper
from infersight.config import Config
from infersight.simulator.recorder import Recorder
from infersight.simulator.run import simulate
from infersight.simulator.scenario import Scenario

PAGING = ("warning", "critical")
PROMTOOL_TIMEOUT_S = 600
_GOT = re.compile(r'\{([^{}]*)\}\s+(\S+?)(?:,|$)')
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class QualityError(RuntimeError):
    """promtool could not evaluate the rules (a tool or rule problem, not an alert verdict)."""


@dataclass(frozen=True)
class Row:
    alert: str
    severity: str
    expected: bool
    fired_minute: float | None  # minutes after t = 0
    deadline_minute: float | None  # onset + within_minutes
    onset_minute: float | None
    known_failure: str | None = None
    allowed: str | None = None  # why it may fire (scenario's may_fire)
    model: str | None = None  # set: it fired for this model, which the scenario says stays quiet
    pool: str | None = None  # set: it fired for this pool, which the scenario says stays quiet

    @property
    def after_onset(self) -> float | None:
        if self.fired_minute is None:
            return None
        return self.fired_minute - (self.onset_minute or 0.0)

    @property
    def ok(self) -> bool:
        if self.expected:
            return self.fired_minute is not None and self.fired_minute <= self.deadline_minute
        return self.fired_minute is None or self.allowed is not None  # anything else at warning+ fails


@dataclass
class Result:
    scenario: Scenario
    rows: list[Row] = field(default_factory=list)
    first_fired: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok or r.known_failure for r in self.rows)


def probe_expr(minutes: int) -> str:
    """When each alert first fired, per model and pool (an alert without those labels reads "")."""
    return (f'min by (alertname, severity, model, pool) (min_over_time(timestamp(ALERTS{{alertstate="firing"}})'
            f'[{minutes}m:1m])) / 60')


def group_eval_order(rule_texts: list[str]) -> list[str]:
    """Every rule group, recording groups first, then the rest in file order.

    Without ``group_eval_order`` promtool evaluates the groups of one minute in Go's random map
    order, so an alert reading a recording rule sees this minute's value in one run and last
    minute's in the next: the same series fired a minute apart from run to run. Recording groups
    first is the order rules in one group keep; a real Prometheus, whose groups run at offsets of
    their own, may read a recording up to one evaluation interval older.
    """
    groups = [g for text in rule_texts for g in (yaml.safe_load(text) or {}).get("groups", [])]
    recording = [g["name"] for g in groups if all("record" in r for r in g.get("rules", []))]
    return recording + [g["name"] for g in groups if g["name"] not in recording]


def test_document(recorder: Recorder, rule_files: list[str], minutes: int, eval_order: list[str]) -> dict:
    return {
        "rule_files": rule_files,
        "evaluation_interval": "1m",
        "group_eval_order": eval_order,
        "tests": [{
            "name": "alert quality probe",
            "interval": "1m",
            "input_series": recorder.input_series(),
            "promql_expr_test": [{"expr": probe_expr(minutes), "eval_time": f"{minutes}m", "exp_samples": []}],
        }],
    }


def parse_probe(output: str) -> dict[tuple[str, str, str, str], float]:
    """(alertname, severity, model, pool) -> first firing minute, from promtool's report of the failed probe."""
    fired: dict[tuple[str, str, str, str], float] = {}
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("got:"):
            continue
        for labels_text, value in _GOT.findall(line[4:]):
            labels = dict(_LABEL.findall(labels_text))
            key = tuple(labels.get(k, "") for k in ("alertname", "severity", "model", "pool"))
            fired[key] = float(value)
    return fired


def by_alert(fired: dict[tuple[str, ...], float]) -> dict[tuple[str, str], float]:
    """(alertname, severity) -> the first minute it fired for any model and pool."""
    out: dict[tuple[str, str], float] = {}
    for (alert, severity, *_where), minute in fired.items():
        out[(alert, severity)] = min(minute, out.get((alert, severity), minute))
    return out


def evaluate(recorder: Recorder, config: Config, minutes: int,
             workdir: Path) -> dict[tuple[str, str, str, str], float]:
    rule_files, rule_texts = [], []
    for relative, text in render_rules(config).items():
        path = workdir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        rule_files.append(relative)
        rule_texts.append(text)
    test_file = workdir / "quality_test.yml"
    document = test_document(recorder, rule_files, minutes, group_eval_order(rule_texts))
    with test_file.open("w") as out:
        yaml.dump(document, out, Dumper=SafeDumper, width=1 << 30, sort_keys=False)
    done = subprocess.run([_binary("promtool"), "test", "rules", test_file.name], cwd=workdir, capture_output=True,
                          text=True, timeout=PROMTOOL_TIMEOUT_S)
    output = done.stdout + done.stderr
    fired = parse_probe(output)
    if done.returncode != 0 and not fired:
        raise QualityError(f"promtool could not evaluate the rules:\n{output[-3000:]}")
    if done.returncode == 0 and "SUCCESS" not in output:
        raise QualityError(f"unexpected promtool output:\n{output[-3000:]}")
    return fired


def judge(scenario: Scenario, fired_by_model: dict[tuple[str, ...], float]) -> Result:
    fired = by_alert(fired_by_model)
    result = Result(scenario, first_fired=dict(fired))
    onset = scenario.onset_minute
    expected = set()
    for e in scenario.expect:
        key = (e.alert, e.severity.value)
        expected.add(key)
        result.rows.append(Row(e.alert, e.severity.value, True, fired.get(key), onset + e.within_minutes, onset,
                               e.known_failure))
    allowed = {(a.alert, a.severity.value): a.reason for a in scenario.may_fire}
    for (alert, severity), minute in sorted(fired.items()):
        key = (alert, severity)
        if key not in expected and severity in PAGING:
            result.rows.append(Row(alert, severity, False, minute, None, onset, allowed=allowed.get(key)))
    # A model the incident does not touch stays quiet, whatever fires for the others.
    for (alert, severity, model, *_pool), minute in sorted(fired_by_model.items()):
        if model in scenario.quiet_models and severity in PAGING:
            result.rows.append(Row(alert, severity, False, minute, None, onset, model=model))
    # A pool the incident does not touch (stable beside a canary) likewise.
    for (alert, severity, _model, *pool), minute in sorted(fired_by_model.items()):
        if pool and pool[0] in scenario.quiet_pools and severity in PAGING:
            result.rows.append(Row(alert, severity, False, minute, None, onset, pool=pool[0]))
    return result


def rule_names(config: Config) -> set[str]:
    """Every metric name the generated rules mention."""
    text = "\n".join(render_rules(config).values())
    return set(_NAME.findall(text))


def record(scenario: Scenario, config: Config, on_minute: Callable[[int, int], None] | None = None,
           also: frozenset[str] = frozenset()) -> Recorder:
    """The scenario's series that some rule reads (plus ``also``): other series cannot change a
    rule's result, and leaving them out keeps promtool fast."""
    names = rule_names(config) | also
    _fleet, recorder = simulate(scenario, config, epoch=0.0, on_minute=on_minute, keep=names.__contains__)
    return recorder


def run(scenario: Scenario, config: Config, workdir: Path | None = None,
        on_minute: Callable[[int, int], None] | None = None, recorder: Recorder | None = None) -> Result:
    """The verdict on one scenario; ``recorder``: its series already recorded (see :func:`record`)."""
    if recorder is None:
        recorder = record(scenario, config, on_minute)
    if workdir is not None:
        return judge(scenario, evaluate(recorder, config, scenario.minutes, workdir))
    with tempfile.TemporaryDirectory(prefix="infersight-quality-") as tmp:
        return judge(scenario, evaluate(recorder, config, scenario.minutes, Path(tmp)))


def _cell(row: Row) -> str:
    if row.fired_minute is None:
        return "did not fire"
    return f"{row.after_onset:+g} min" if row.onset_minute is not None else f"minute {row.fired_minute:g}"


def table(results: list[Result]) -> str:
    """The scenario x alert table (Markdown), as the README keeps it."""
    lines = ["| scenario | alert | severity | fired (after onset) | deadline | verdict |",
             "|---|---|---|---|---|---|"]
    for result in results:
        name = result.scenario.name
        if not result.rows:
            lines.append(f"| {name} | (none at warning or above) | | | | ok |")
        for row in result.rows:
            deadline = f"+{row.deadline_minute - row.onset_minute:g} min" if row.expected else "must not fire"
            if row.allowed:
                deadline, verdict = "may fire", f"ok: {row.allowed}"
            elif row.ok:
                verdict = "ok"
            elif row.known_failure:
                verdict = f"known failure: {row.known_failure}"
            else:
                verdict = "FAIL"
            alert = row.alert if row.model is None else f"{row.alert} ({row.model})"
            if row.model is not None:
                deadline = "must not fire (quiet model)"
            if row.pool is not None:
                alert, deadline = f"{row.alert} (pool {row.pool})", "must not fire (quiet pool)"
            lines.append(f"| {name} | {alert} | {row.severity} | {_cell(row)} | {deadline} | {verdict} |")
    return "\n".join(lines)

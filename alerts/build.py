"""``infersight alerts build``: write rules/*.yml, alertmanager.yml and tests/*.yml into one folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infersight.alerts.alertmanager import alertmanager_config
from infersight.alerts.model import Alert, Recording
from infersight.alerts.promtests import test_file
from infersight.alerts.recording import recording_rules
from infersight.alerts.recording_tests import recording_test_file
from infersight.alerts.rulefiles import alert_file, recording_file, recordings_read_by
from infersight.alerts.rules import alerts_by_file
from infersight.alerts.yamlout import dump
from infersight.config import Config
from infersight.thresholds import thresholds_from_config

RECORDING_FILE = "recording.yml"
TEST_RULES = "rules"  # under tests/: the recording rules each test file loads


@dataclass(frozen=True)
class Built:
    out: Path
    rule_files: list[Path]
    test_files: list[Path]
    alertmanager: Path
    alert_count: int
    recording_count: int


def render_rules(config: Config) -> dict[str, str]:
    """The rule files alone (``rules/*.yml`` by relative path): what Prometheus loads, without the
    promtool tests, which are most of :func:`render_all`'s work."""
    limits = thresholds_from_config(config)
    files = {f"rules/{RECORDING_FILE}": dump(recording_file(recording_rules(limits)))}
    for group, alerts in alerts_by_file(limits).items():
        files[f"rules/{group}.yml"] = dump(alert_file(limits, group, alerts))
    return files


def recording_rules_for_tests(recordings: list[Recording], alerts: list[Alert]) -> str | None:
    """The recording rule file a promtool test of ``alerts`` loads beside their own rule files: only the
    recording rules they read (promtool evaluates every loaded rule at every step). None: they read none."""
    read = recordings_read_by(recordings, [a.expr for a in alerts])
    return dump(recording_file(read)) if read else None


def render_all(config: Config) -> dict[str, str]:
    """Every output file by relative path, as text (nothing written)."""
    limits = thresholds_from_config(config)
    by_file = alerts_by_file(limits)
    files = render_rules(config)
    recordings = recording_rules(limits)
    for group, alerts in by_file.items():
        # each test file loads its group's rules and only the recording rules those read (same values)
        read = recording_rules_for_tests(recordings, alerts)
        rule_files = [f"../rules/{group}.yml"]
        if read:
            rule_files.insert(0, f"{TEST_RULES}/recording_for_{group}.yml")
            files[f"tests/{rule_files[0]}"] = read
        files[f"tests/{group}_test.yml"] = dump(test_file(limits, alerts, rule_files))
    files["tests/recording_test.yml"] = dump(recording_test_file(limits, f"../rules/{RECORDING_FILE}"))
    all_alerts = [a for alerts in by_file.values() for a in alerts]
    files["alertmanager.yml"] = dump(alertmanager_config(config, all_alerts))
    return files


def build(config: Config, out: str | Path) -> Built:
    out = Path(out)
    files = render_all(config)  # render everything first: a config error writes nothing
    for relative, text in files.items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    limits = thresholds_from_config(config)
    return Built(
        out=out,
        rule_files=sorted(out / p for p in files if p.startswith("rules/")),
        test_files=sorted(out / p for p in files if p.startswith("tests/") and p.endswith("_test.yml")),
        alertmanager=out / "alertmanager.yml",
        alert_count=sum(len(a) for a in alerts_by_file(limits).values()),
        recording_count=len(recording_rules(limits)),
    )

"""The README's per-alert table (what each alert catches and how fast) names every alert the rules
generate and nothing else, the config keys it quotes exist, and where the simulator measured when an
alert fires in the scenario that expects it, the table states that time: a renamed alert or
threshold, or a rule change that moves a measured time, shows here."""

from __future__ import annotations

import re
from pathlib import Path

from infersight.alerts.rules import all_alerts
from infersight.config import Config, parse_config
from infersight.thresholds import thresholds_from_config

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HEADER = "| alert | catches | fires |"
# The alert-quality table, kept equal to a real promtool run by tests/simulator/test_alert_quality.py.
SIMULATOR_README = ROOT / "simulator" / "README.md"
TABLE_START, TABLE_END = "<!-- alert-quality table: start -->", "<!-- alert-quality table: end -->"
MEASURED = "simulator: "  # the last part of a "fires" cell: "simulator: overload +11 min, ..."
MINUTES = r"\+[0-9.]+ min"
MEASURED_ITEM = re.compile(rf"([a-z0-9-]+) ({MINUTES})(?: \((\w+)\))?")


def _rows() -> list[list[str]]:
    lines = README.read_text().splitlines()
    start = lines.index(HEADER) + 2  # past the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _config_keys() -> set[str]:
    keys = set()
    for section, field in Config.model_fields.items():
        model = field.annotation
        for name in getattr(model, "model_fields", {}):
            keys |= {name, f"{section}.{name}"}
    return keys


def test_the_table_names_every_alert_once():
    names = {a.name for a in all_alerts(thresholds_from_config(parse_config({})))}
    listed, prefixes = [], []
    for alert_cell, _catches, fires in _rows():
        assert fires, alert_cell
        for name in alert_cell.split(" / "):
            (prefixes if name.endswith("*") else listed).append(name.rstrip("*"))
    assert len(listed) == len(set(listed)), "an alert listed twice"
    assert set(listed) <= names, f"not an alert: {set(listed) - names}"
    covered = set(listed) | {n for n in names for p in prefixes if n.startswith(p)}
    assert names - covered == set(), "alerts the README table does not mention"


def test_the_config_keys_it_quotes_exist():
    keys = _config_keys()
    quoted = {k for _alert, catches, _fires in _rows() for k in re.findall(r"`([a-z_][a-z0-9_.]*)`", catches)}
    assert quoted, "the table quotes no config key; the scan is broken"
    assert quoted - keys == set()


def _simulated() -> dict[str, list[tuple[str, str]]]:
    """Per alert, (scenario, fired after onset) where the scenario expects the alert and it fired."""
    table = SIMULATOR_README.read_text().split(TABLE_START, 1)[1].split(TABLE_END, 1)[0]
    measured: dict[str, list[tuple[str, str]]] = {}
    for line in table.strip().splitlines()[2:]:
        scenario, alert, _severity, fired, deadline, _verdict = (c.strip() for c in line.strip("|").split("|"))
        if re.fullmatch(MINUTES, deadline) and re.fullmatch(MINUTES, fired):
            measured.setdefault(alert, []).append((scenario, fired))
    return measured


def test_the_fires_column_states_the_times_the_simulator_measured():
    measured = _simulated()
    assert len(measured) >= 5, "hardly any firing time read from simulator/README.md; the parse is broken"
    for alert_cell, _catches, fires in _rows():
        cells = alert_cell.split(" / ")
        names = [n for n in cells if not n.endswith("*")]
        names += [a for a in measured for n in cells if n.endswith("*") and a.startswith(n.rstrip("*"))]
        several = len(names) > 1 or any(n.endswith("*") for n in cells)  # the row names the alert after each time
        expected = [(scenario, fired, name if several else None)
                    for name in names for scenario, fired in measured.get(name, [])]
        stated = []
        if MEASURED in fires:
            for item in fires.split(MEASURED, 1)[1].split(", "):
                match = MEASURED_ITEM.fullmatch(item.strip())
                assert match, f"{alert_cell}: cannot read {item!r} (write 'SCENARIO +N min', comma-separated)"
                stated.append(match.groups())
        want = MEASURED + ", ".join(f"{s} {t}" + (f" ({n})" if n else "") for s, t, n in expected)
        assert sorted(stated) == sorted(expected), (
            f"{alert_cell}: the fires column must end with {want!r} (from simulator/README.md's alert-quality "
            "table)" if expected else f"{alert_cell}: the simulator measured no firing time for it; drop "
            f"{MEASURED!r}")

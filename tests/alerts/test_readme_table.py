"""The README's per-alert table (what each alert catches and how fast) names every alert the rules
generate and nothing else, and the config keys it quotes exist: a renamed alert or threshold shows here."""

from __future__ import annotations

import re
from pathlib import Path

from infersight.alerts.limits import limits_from_config
from infersight.alerts.rules import all_alerts
from infersight.config import Config, parse_config

README = Path(__file__).resolve().parents[2] / "README.md"
HEADER = "| alert | catches | fires |"


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
    names = {a.name for a in all_alerts(limits_from_config(parse_config({})))}
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

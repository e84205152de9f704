"""Every dashboard against Grafana's own published schema (@grafana/schema, checked by TypeScript's tsc).

`make grafana-schema` installs the pinned packages into .grafana-schema/; without them the test skips
on a laptop and fails under CI=true.
"""

from __future__ import annotations

import copy

import pytest

from infersight.config import parse_config
from infersight.dashboards import schema_check
from infersight.dashboards.build import all_dashboards
from tests.conftest import IN_CI
from tests.dashboards.boards import default_boards, panels


@pytest.fixture(scope="module")
def installed():
    tsc = schema_check.INSTALL_DIR / schema_check.TSC
    if not tsc.exists():
        message = f"{schema_check.INSTALL_DIR} lacks @grafana/schema and typescript (make grafana-schema)"
        if IN_CI:
            pytest.fail(message + " -- CI must install it")
        pytest.skip(message)
    return schema_check.INSTALL_DIR


@pytest.mark.real
def test_every_dashboard_conforms_to_grafanas_schema(installed):
    boards = default_boards()
    custom = all_dashboards(parse_config({"clickhouse": {"dsn": "http://ch.example:8123/traces"},
                                          "slo": {"ttft_seconds": 0.5}}))
    assert [str(e) for e in schema_check.check(boards + custom, installed)] == []


def _first(board: dict, kind: str) -> dict:
    return next(p for p in panels(board) if p["type"] == kind)


# One break per dashboard, each something Grafana's schema refuses (or an old-schema shape).
BREAKS = {
    "infersight-fleet": lambda b: b.update(sharedCrosshair=True),  # schemaVersion 12's crosshair flag
    "infersight-engines": lambda b: _first(b, "timeseries")["options"]["legend"].update(placement="left"),
    "infersight-gpus": lambda b: _first(b, "timeseries")["fieldConfig"]["defaults"]["thresholds"].update(
        mode="absolut"),
    "infersight-pipeline": lambda b: _first(b, "timeseries")["options"].pop("tooltip"),
    "infersight-traces": lambda b: _first(b, "table")["fieldConfig"]["defaults"]["custom"].update(
        cellOptions="auto"),
}


@pytest.mark.real
def test_the_check_finds_each_break_where_it_is(installed):
    boards = copy.deepcopy(default_boards())
    assert {b["uid"] for b in boards} >= set(BREAKS)
    expected = set()
    for board in boards:
        if board["uid"] in BREAKS:
            BREAKS[board["uid"]](board)
            expected.add(board["uid"])
    errors = schema_check.check(boards, installed)
    assert {e.dashboard for e in errors} == expected, [str(e) for e in errors]
    panels_named = {e.panel for e in errors if e.dashboard != "infersight-fleet"}
    assert "" not in panels_named  # panel errors name their panel, the crosshair flag its dashboard


@pytest.mark.real
def test_an_unknown_panel_field_is_refused(installed):
    boards = copy.deepcopy(default_boards()[:1])
    panel = _first(boards[0], "timeseries")
    panel["maxDataPont"] = 100  # a typo of maxDataPoints
    errors = schema_check.check(boards, installed)
    assert len(errors) == 1 and errors[0].panel == panel["title"] and "maxDataPont" in errors[0].message


def test_missing_tools_are_named(tmp_path):
    with pytest.raises(schema_check.SchemaToolsMissing, match="make grafana-schema"):
        schema_check.check(default_boards(), tmp_path)

"""Every PromQL expression of every dashboard, run by a real Prometheus scraping our real exporters.

The Prometheus loads the rules of `infersight alerts build`, so panels that read recording rules get
recorded data too. A panel passes when its query parses and returns at least one series.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from infersight.alerts.build import build as build_alerts
from infersight.config import parse_config
from infersight.signals import gateway
from tests.conftest import PrometheusServer, require_tool
from tests.dashboards.boards import default_boards, prometheus_variables, promql
from tests.dashboards.live_fleet import LiveFleet

DEADLINE_S = 30


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    require_tool("prometheus")
    rules = build_alerts(parse_config({}), tmp_path_factory.mktemp("alerts")).rule_files
    fleet = LiveFleet()
    prom = None
    try:
        prom = PrometheusServer(fleet.targets, rule_files=[str(p) for p in rules])
        prom.wait_for(gateway.EJECTIONS.select())  # the first ejection is scraped
        fleet.eject_again()
        yield prom
    finally:
        if prom is not None:
            prom.stop()
        fleet.stop()


def _query(prom: PrometheusServer, expr: str) -> tuple[list | None, str]:
    """(result, error): a PromQL syntax error comes back as HTTP 400 with Prometheus's message."""
    url = f"{prom.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)["data"]["result"], ""
    except urllib.error.HTTPError as exc:
        return None, json.load(exc).get("error", str(exc))


def test_every_promql_expression_parses_and_returns_data(live):
    queries = promql(default_boards())
    assert len(queries) > 60
    pending = {q.expanded: q for q in queries}
    errors: dict[str, str] = {}
    deadline = time.monotonic() + DEADLINE_S
    while pending and time.monotonic() < deadline:
        for expr in list(pending):
            result, error = _query(live, expr)
            if error:
                errors[f"{pending.pop(expr).panel}: {expr}"] = error
            elif result:
                del pending[expr]
        time.sleep(0.5)
    assert errors == {}, "PromQL Prometheus refuses"
    missing = [f"{q.dashboard} / {q.panel}: {expr}" for expr, q in pending.items()]
    assert missing == [], "panels without data:\n" + "\n".join(missing)


def test_variables_list_values_from_live_series(live):
    for board in default_boards():
        for var in prometheus_variables(board):
            metric, label = var["query"][len("label_values("):-1].split(", ")
            url = f"{live.url}/api/v1/label/{label}/values?{urllib.parse.urlencode({'match[]': metric})}"
            with urllib.request.urlopen(url, timeout=5) as response:
                assert json.load(response)["data"], (board["uid"], var["name"])


def test_an_unknown_series_returns_nothing(live):
    """The data check can fail: a name no exporter produces has no data, and a typo does not parse."""
    assert _query(live, "llm_no_such_series_total") == ([], "")
    result, error = _query(live, "sum by (model (llm_requests_total)")
    assert result is None and "parse error" in error

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
from tests.dashboards.boards import ALL, RATE_INTERVAL, VARIABLE, default_boards, prometheus_variables, promql
from tests.dashboards.live_fleet import LiveFleet

pytestmark = pytest.mark.real  # a real Prometheus

DEADLINE_S = 30
DCGM_NODE = "gpu-node-01"  # the hostname label of the dcgm-exporter fixture


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


# What the dcgm-exporter fixture (default counters) does not export, so those panels stay empty for its
# GPUs: profiling fields (SM activity/occupancy, PCIe/NVLink), the power limit, ECC and clock-event
# reasons; and no engine runs on that node, so there is no energy per token.
DCGM_ABSENT = {"SM activity", "SM occupancy", "PCIe and NVLink traffic", "Power draw and limit",
               "ECC errors in the last hour", "GPUs throttled, by reason", "Energy per generated token"}


def test_gpu_panels_read_the_dcgm_source_too(live):
    """The GPUs dashboard with node = the dcgm-exporter host: its panels show that source's GPUs as well."""
    board = next(b for b in default_boards() if b["uid"] == "infersight-gpus")
    pending = {q.text.replace("$node", DCGM_NODE).replace("$__rate_interval", RATE_INTERVAL): q.panel
               for q in promql([board]) if "$node" in q.text}
    assert len(pending) > 20
    deadline = time.monotonic() + DEADLINE_S
    while not set(pending.values()) <= DCGM_ABSENT and time.monotonic() < deadline:
        for expr in list(pending):
            result, error = _query(live, VARIABLE.sub(ALL, expr))
            assert not error, expr
            if result:
                del pending[expr]
        time.sleep(0.5)
    assert set(pending.values()) <= DCGM_ABSENT, sorted(set(pending.values()) - DCGM_ABSENT)
    shown = {q.panel for q in promql([board])} - set(pending.values())
    assert {"GPU utilization", "Tensor core activity", "SM clock", "Framebuffer used and total",
            "Memory bandwidth utilization", "Temperature", "Hottest GPU"} <= shown


def test_gateway_sources_are_scraped(live):
    result, _ = _query(live, gateway.SOURCE_UP.select())
    assert result and {r["metric"]["kind"] for r in result} and all(r["value"][1] == "1" for r in result)

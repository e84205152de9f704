"""The canary comparison shows the canary's hot spot: the canary dashboard's pool panels, evaluated by
promtool over the series of ``canary-hot-spot`` (the same recorded run as its alert-quality verdict).

The scenario's ``magnitudes`` state what its incident looked like on those panels: the busiest
canary instance's share of the pool's requests in flight, its p99 TTFT against stable's slowest
instance, and a cached prompt share no better than stable's.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from infersight.alerts.tools import _binary
from infersight.alerts.yamlout import SafeDumper
from infersight.dashboards import canary
from infersight.simulator import quality
from tests.conftest import require_tool
from tests.dashboards.boards import VARIABLE, default_boards, promql
from tests.simulator.runs import SCENARIOS, recorded

pytestmark = pytest.mark.real  # promtool
NAME = "canary-hot-spot"
# $__rate_interval for these series: Grafana takes 4 scrape intervals, and the simulator scrapes once a minute.
RATE_INTERVAL = "4m"
PANELS = {"share": "Busiest instance's share of its pool's requests in flight",
          "p99": "Slowest instance's TTFT p99 by pool", "cached": "Cached prompt share by pool"}
CHECKS = {"canary_busiest_in_flight_share", "canary_slowest_ttft_p99_s", "stable_slowest_ttft_p99_s",
          "cached_share_gain_at_most"}
_EXPR = re.compile(r'expr: "(.*)", time: (\d+)m')


def _expanded(title: str) -> str:
    (query,) = [q for q in promql(default_boards()) if q.dashboard == canary.UID and q.panel == title]
    return VARIABLE.sub(".*", query.text.replace("$__rate_interval", RATE_INTERVAL))


@functools.cache
def panels_at(minutes: tuple[int, ...]) -> dict[tuple[str, int], dict[tuple[str, str], float]]:
    """(panel key, minute) -> {(pool, strategy): value}, as promtool evaluates the panels' queries."""
    require_tool("promtool")
    recorder = recorded(NAME)
    exprs = {key: _expanded(title) for key, title in PANELS.items()}
    tests = [{"expr": expr, "eval_time": f"{m}m", "exp_samples": []} for expr in exprs.values() for m in minutes]
    document = {"rule_files": [], "evaluation_interval": "1m", "tests": [
        {"name": "canary comparison", "interval": "1m", "input_series": recorder.input_series(),
         "promql_expr_test": tests}]}
    with tempfile.TemporaryDirectory(prefix="infersight-canary-") as tmp:
        path = Path(tmp) / "comparison_test.yml"
        with path.open("w") as out:
            yaml.dump(document, out, Dumper=SafeDumper, width=1 << 30, sort_keys=False)
        done = subprocess.run([_binary("promtool"), "test", "rules", path.name], cwd=tmp, capture_output=True,
                              text=True, timeout=quality.PROMTOOL_TIMEOUT_S)
    by_expr = {expr.replace("\n", "\\n"): key for key, expr in exprs.items()}
    out: dict[tuple[str, int], dict[tuple[str, str], float]] = {}
    current = None
    for line in (done.stdout + done.stderr).splitlines():
        line = line.strip()
        found = _EXPR.search(line)
        if found:
            text = found.group(1).encode().decode("unicode_escape")
            key = next(k for e, k in by_expr.items() if e.encode().decode("unicode_escape") == text)
            current = (key, int(found.group(2)))
        elif line.startswith("got:") and current is not None:
            values = {}
            for labels_text, value in quality._GOT.findall(line[4:]):
                labels = dict(quality._LABEL.findall(labels_text))
                if value not in ("NaN",):
                    values[(labels.get("pool", ""), labels.get("strategy", ""))] = float(value)
            out[current] = values
    assert out, f"promtool evaluated no panel:\n{(done.stdout + done.stderr)[-2000:]}"
    return out


BEFORE = 9  # the canary still on least-connection
AFTER = (15, 20, 25, 29)  # from 5 minutes after the strategy change to the end


def _magnitude(key: str):
    return SCENARIOS[NAME].magnitudes[key]


def test_the_scenario_states_what_the_comparison_must_show():
    assert CHECKS <= set(SCENARIOS[NAME].magnitudes), sorted(CHECKS - set(SCENARIOS[NAME].magnitudes))


def test_before_the_change_canary_and_stable_look_alike():
    got = panels_at((BEFORE, *AFTER))
    share, p99 = got[("share", BEFORE)], got[("p99", BEFORE)]
    assert set(share) == {("canary", "least_conn"), ("stable", "least_conn")}, share
    assert all(v < 0.45 for v in share.values()), share  # 4 instances each: 0.25 when even
    assert p99[("canary", "least_conn")] < 2 * p99[("stable", "least_conn")], p99


@pytest.mark.parametrize("minute", AFTER)
def test_the_comparison_shows_the_hot_spot_under_the_canarys_strategy(minute):
    got = panels_at((BEFORE, *AFTER))
    hot, stable = ("canary", "prefix_affinity"), ("stable", "least_conn")
    share, p99, cached = got[("share", minute)], got[("p99", minute)], got[("cached", minute)]
    low, high = _magnitude("canary_busiest_in_flight_share")
    assert low <= share[hot] <= high, f"minute {minute}: busiest canary instance holds {share[hot]:.2f}"
    assert share[stable] < low, f"minute {minute}: stable's busiest holds {share[stable]:.2f} of its pool"
    low, high = _magnitude("canary_slowest_ttft_p99_s")
    assert low <= p99[hot] <= high, f"minute {minute}: slowest canary instance's p99 {p99[hot]:.2f} s"
    low, high = _magnitude("stable_slowest_ttft_p99_s")
    assert low <= p99[stable] <= high, f"minute {minute}: slowest stable instance's p99 {p99[stable]:.2f} s"
    # The cache-chasing policy bought no hits: stable's least-connection already hits the handbooks.
    assert cached[hot] - cached[stable] <= _magnitude("cached_share_gain_at_most"), cached

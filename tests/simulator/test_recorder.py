"""The series writer: promtool's expanding notation and OpenMetrics that promtool backfills."""

from __future__ import annotations

import subprocess

import pytest

from infersight.simulator.recorder import Recorder, promtool_values
from tests.conftest import require_tool


def test_counter_runs_compress_and_absent_minutes_stay_absent():
    assert promtool_values([None, None, 1.0, 2.0, 3.0, 4.0]) == "_x2 1+1x3"
    assert promtool_values([5.0, 5.0, 5.0]) == "5x2"
    assert promtool_values([0.25, 0.5]) == "0.25 0.5"  # floats are written as they are, never summed up


def test_a_series_that_goes_away_gets_a_staleness_marker():
    assert promtool_values([1.0, 1.0, 1.0, None, None, None]) == "1x2 stale _x2"
    assert promtool_values([1.0, None]) == "1 stale"


def test_a_series_appears_at_the_scrape_that_first_exposed_it():
    rec = Recorder()
    rec.record([("a_total", {"x": "1"}, 0.0)])
    rec.record([("a_total", {"x": "1"}, 1.0), ("b_total", {"x": "1"}, 1.0)])
    rec.record([("b_total", {"x": "1"}, 2.0)])
    assert rec.series[("a_total", (("x", "1"),))] == [0.0, 1.0, None]
    assert rec.series[("b_total", (("x", "1"),))] == [None, 1.0, 2.0]
    values = {s["series"]: s["values"] for s in rec.input_series()}
    assert values == {'a_total{x="1"}': "0 1 stale", 'b_total{x="1"}': "_ 1 2"}


@pytest.mark.real
def test_openmetrics_backfills_with_promtool(tmp_path):
    promtool = require_tool("promtool")
    rec = Recorder()
    for minute in range(5):
        rec.record([("llm_requests_total", {"model": 'm"1', "outcome": "success"}, float(minute * 10))])
    path = tmp_path / "series.om"
    rec.write_openmetrics(path, start=1_700_000_000.0)
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(path), str(tmp_path / "db")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    _header, *blocks = [line.split() for line in done.stdout.splitlines() if line.strip()]
    # columns: ULID, MIN TIME, MAX TIME, DURATION, NUM SAMPLES, ...
    assert sum(int(b[4]) for b in blocks) == 5

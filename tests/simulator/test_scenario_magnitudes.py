"""A scenario's ``magnitudes`` are what its incident account says; the simulation must reproduce them.

Without this the field is a claim nobody checks: a scenario could be tuned until its alerts fire
and still say it reproduces the incident. The fleet's p95 TTFT is computed from the gateway's TTFT
histogram as recorded, over 5-minute windows, as PromQL's histogram_quantile would.
"""

from __future__ import annotations

import math

import pytest

from infersight.config import Config
from infersight.signals import request
from tests.simulator.runs import SCENARIOS, recorded
from tests.simulator.test_canary_comparison import CHECKS as COMPARISON_CHECKS  # checked there

WINDOW = 5  # minutes, as the SLO recordings' rate windows
TTFT_CHECKS = {"ttft_p95_before_s", "ttft_p95_peak_s"}
BREACH_CHECKS = {"ttft_p95_under_target_until_minute"}
RETRY_CHECKS = {"client_retries_per_request_peak"}
CHECKED = TTFT_CHECKS | RETRY_CHECKS | BREACH_CHECKS | COMPARISON_CHECKS


def _summed(name: str, recorder) -> list[float]:
    """Every series called ``name`` added up, minute by minute (absent reads 0, as a new counter)."""
    total = [0.0] * recorder.steps
    for (n, _labels), values in recorder.series.items():
        if n == name:
            for i, v in enumerate(values):
                total[i] += v or 0.0
    return total


def _p95_by_minute(name: str) -> dict[int, float]:
    """Minute -> the fleet's p95 TTFT over the ``WINDOW`` minutes ending there."""
    bucket = request.TTFT.name + "_bucket"
    recorder = recorded(name)
    totals: dict[float, list[float]] = {}
    for (series_name, labels), values in recorder.series.items():
        if series_name != bucket:
            continue
        row = totals.setdefault(float(dict(labels)["le"]), [0.0] * recorder.steps)
        for i, v in enumerate(values):
            row[i] += v or 0.0
    bounds = sorted(totals)
    out = {}
    for minute in range(WINDOW, recorder.steps):
        counts = [totals[b][minute] - totals[b][minute - WINDOW] for b in bounds]
        rank = 0.95 * counts[-1]
        i = next(i for i, c in enumerate(counts) if c >= rank)
        if math.isinf(bounds[i]):
            out[minute] = bounds[-2]
            continue
        start, below = (0.0, 0.0) if i == 0 else (bounds[i - 1], counts[i - 1])
        out[minute] = start + (bounds[i] - start) * (rank - below) / (counts[i] - below)
    return out


def test_every_magnitude_a_scenario_states_is_checked():
    stated = {key for s in SCENARIOS.values() for key in s.magnitudes}
    assert stated <= CHECKED, f"no check for {sorted(stated - CHECKED)}: add one here"


@pytest.mark.parametrize("name", [n for n, s in SCENARIOS.items() if s.magnitudes.keys() & TTFT_CHECKS])
def test_the_simulated_ttft_is_the_accounts(name):
    scenario = SCENARIOS[name]
    p95 = _p95_by_minute(name)
    onset = scenario.onset_minute
    before = [v for m, v in p95.items() if m <= onset]
    after = [v for m, v in p95.items() if m > onset]
    if "ttft_p95_before_s" in scenario.magnitudes:
        low, high = scenario.magnitudes["ttft_p95_before_s"]
        assert before and all(low <= v <= high for v in before), (
            f"p95 TTFT before onset {min(before):.2f}..{max(before):.2f} s, the account says {low}..{high} s")
    if "ttft_p95_peak_s" in scenario.magnitudes:
        low, high = scenario.magnitudes["ttft_p95_peak_s"]
        assert low <= max(after) <= high, f"peak p95 TTFT {max(after):.2f} s, the account says {low}..{high} s"


@pytest.mark.parametrize("name", [n for n, s in SCENARIOS.items() if s.magnitudes.keys() & RETRY_CHECKS])
def test_the_simulated_retry_storm_is_the_accounts(name):
    """Client retries per request at the storm's peak, as the incident account measured them."""
    scenario = SCENARIOS[name]
    recorder = recorded(name)
    retries, requests = _summed(request.CLIENT_RETRIES.name, recorder), _summed(request.REQUESTS.name, recorder)
    ratios = [(retries[m] - retries[m - WINDOW]) / (requests[m] - requests[m - WINDOW])
              for m in range(max(WINDOW, round(scenario.onset_minute)), recorder.steps)
              if requests[m] > requests[m - WINDOW]]
    low, high = scenario.magnitudes["client_retries_per_request_peak"]
    assert low <= max(ratios) <= high, (
        f"peak client retries per request {max(ratios):.2f}, the account says {low}..{high}")


@pytest.mark.parametrize("name", [n for n, s in SCENARIOS.items() if s.magnitudes.keys() & BREACH_CHECKS])
def test_the_breach_comes_when_the_scenario_says(name):
    """Where a scenario's alerts are due "before the breach", the breach is where it says: p95 TTFT
    under the p95 target up to that minute, and over it later (else the deadlines prove nothing)."""
    until = SCENARIOS[name].magnitudes["ttft_p95_under_target_until_minute"]
    target = Config().slo.ttft_p95_seconds
    p95 = _p95_by_minute(name)
    early = {m: round(v, 2) for m, v in p95.items() if m <= until and v > target}
    assert not early, f"p95 TTFT over the {target:g} s target before minute {until}: {early}"
    assert any(v > target for m, v in p95.items() if m > until), f"p95 TTFT never passes {target:g} s after {until}"

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
from infersight.simulator.run import simulate
from infersight.simulator.scenario import builtin, load

WINDOW = 5  # minutes, as the SLO recordings' rate windows
CHECKED = {"ttft_p95_before_s", "ttft_p95_peak_s"}
SCENARIOS = {name: load(path) for name, path in builtin().items()}


def _p95_by_minute(scenario) -> dict[int, float]:
    """Minute -> the fleet's p95 TTFT over the ``WINDOW`` minutes ending there."""
    name = request.TTFT.name + "_bucket"
    _fleet, recorder = simulate(scenario, Config(), keep={name}.__contains__)
    totals: dict[float, list[float]] = {}
    for (_name, labels), values in recorder.series.items():
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


@pytest.mark.parametrize("name", [n for n, s in SCENARIOS.items() if s.magnitudes.keys() & CHECKED])
def test_the_simulated_ttft_is_the_accounts(name):
    scenario = SCENARIOS[name]
    p95 = _p95_by_minute(scenario)
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

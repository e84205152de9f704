"""One simulation per scenario for the whole test session: the alert-quality test and the magnitude
checks read the same recorded series, so each scenario runs once (the simulator folder's CI cost)."""

from __future__ import annotations

import functools

from infersight.config import Config
from infersight.simulator import quality
from infersight.simulator.recorder import Recorder
from infersight.simulator.scenario import Scenario, builtin, load

SCENARIOS: dict[str, Scenario] = {name: load(path) for name, path in builtin().items()}


@functools.cache
def recorded(name: str) -> Recorder:
    """The series of scenario ``name`` that the rules read (the magnitude checks read only those too)."""
    return quality.record(SCENARIOS[name], Config())

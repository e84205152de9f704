"""One simulation per scenario for the whole test session: the alert-quality test and the magnitude
checks read the same recorded series, so each scenario runs once (the simulator folder's CI cost)."""

from __future__ import annotations

import functools

from infersight.config import Config
from infersight.signals import engine as engine_signals
from infersight.simulator import quality
from infersight.simulator.recorder import Recorder
from infersight.simulator.scenario import Scenario, builtin, load

SCENARIOS: dict[str, Scenario] = {name: load(path) for name, path in builtin().items()}
# Series the scenario tests read that no rule reads (kept too; only disaggregated scenarios have them)
ALSO = frozenset(engine_signals.KV_TRANSFER_QUEUE.series_names() + engine_signals.KV_TRANSFER_DURATION.series_names())


@functools.cache
def recorded(name: str) -> Recorder:
    """The series of scenario ``name`` that the rules read (the magnitude checks read only those too)."""
    return quality.record(SCENARIOS[name], Config(), also=ALSO)

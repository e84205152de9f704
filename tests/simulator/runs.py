"""One simulation per scenario for the whole test session: the alert-quality test and the magnitude
checks read the same recorded series, so each scenario runs once (the simulator folder's CI cost).

The scenarios are the suite's largest CPU cost and the rest of the suite runs on one core: when
the session selects their tests, :func:`prefetch` (called at the end of collection, see
``tests/simulator/conftest.py``) starts them in worker processes on the other cores, so their
series and promtool verdicts are ready by the time the simulator tests run. Without spare cores,
or for a scenario not prefetched, they run here when first asked for, as before.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor

from infersight.config import Config
from infersight.signals import engine as engine_signals
from infersight.simulator import quality
from infersight.simulator.recorder import Recorder
from infersight.simulator.scenario import Scenario, builtin, load

SCENARIOS: dict[str, Scenario] = {name: load(path) for name, path in builtin().items()}
# Series the scenario tests read that no rule reads (kept too; only disaggregated scenarios have them)
ALSO = frozenset(engine_signals.KV_TRANSFER_QUEUE.series_names() + engine_signals.KV_TRANSFER_DURATION.series_names())

_pool: ProcessPoolExecutor | None = None
_series: dict[str, Future] = {}
_verdicts: dict[str, Future] = {}


def _simulate(name: str, judge: bool) -> tuple[Recorder, quality.Result | None]:
    """In a worker process: the scenario's series, and with ``judge`` also promtool's verdict on them."""
    recorder = _record(name)
    return recorder, quality.run(SCENARIOS[name], Config(), recorder=recorder) if judge else None


def spare_cores() -> int:
    """Cores beyond the one the test session itself runs on."""
    return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) - 1


def prefetch(names: Iterable[str], judge: bool) -> None:
    """Start the scenarios ``names`` in worker processes (one per spare core); ``judge``: promtool too."""
    global _pool
    names = [n for n in names if n not in _series]
    if not names or spare_cores() < 1:
        return
    if _pool is None:
        # spawn: a forked copy of a pytest process with threads and open servers is not a clean worker.
        _pool = ProcessPoolExecutor(spare_cores(), mp_context=multiprocessing.get_context("spawn"))
    for name in names:
        both = _pool.submit(_simulate, name, judge)
        _series[name] = both
        if judge:
            _verdicts[name] = both


def shutdown() -> None:
    """Cancel what has not started (a session stopped early must not wait for every scenario)."""
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)


def _record(name: str) -> Recorder:
    return quality.record(SCENARIOS[name], Config(), also=ALSO)


def _started(future: Future | None) -> bool:
    """A prefetched run to wait for: one not yet started is cancelled and run here instead, so a test
    never queues behind scenarios it does not read."""
    return future is not None and not future.cancel() and not future.cancelled()


@functools.cache
def recorded(name: str) -> Recorder:
    """The series of scenario ``name`` that the rules read (the magnitude checks read only those too)."""
    if _started(_series.get(name)):
        return _series[name].result()[0]
    return _record(name)


@functools.cache
def verdict(name: str) -> quality.Result:
    """promtool's verdict on scenario ``name``'s series (the caller checks that promtool exists)."""
    if _started(_verdicts.get(name)):
        return _verdicts[name].result()[1]
    return quality.run(SCENARIOS[name], Config(), recorder=recorded(name))

"""The gateway's balancing strategies: pick one instance of a pool for one request.

- ``round_robin``: the next instance in turn.
- ``least_conn``: the fewest requests in flight.
- ``equal_cost``: the earliest estimated finish (queue ahead + own prefill + own decode).
- ``cache_aware``: score = load x (1 - alpha x cache ratio), lowest wins; the cache ratio is the
  share of the prompt the instance already holds in its prefix cache. A high alpha chases the
  cache and can pile one prefix's traffic onto one instance (a hot spot).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from infersight.simulator.engine import SimEngine
from infersight.simulator.request import SimRequest


class Strategy(enum.StrEnum):
    ROUND_ROBIN = "round_robin"
    LEAST_CONN = "least_conn"
    EQUAL_COST = "equal_cost"
    CACHE_AWARE = "cache_aware"


@dataclass(slots=True)
class Choice:
    engine: SimEngine
    score: float


def cache_ratio(engine: SimEngine, req: SimRequest) -> float:
    d = req.draw
    return d.prefix_tokens / d.prompt_tokens if d.prefix_tokens and engine.holds(d.prefix) else 0.0


def estimated_finish_s(engine: SimEngine, req: SimRequest, now: float) -> float:
    d = req.draw
    todo = d.prompt_tokens * (1.0 - cache_ratio(engine, req))
    prefill = todo / engine.physics.prefill_tokens_per_s
    return engine.probe_seconds(now) + prefill + d.output_tokens * engine.step_s(now)


def choose(strategy: Strategy, candidates: Sequence[SimEngine], in_flight: dict[str, int], cap: int,
           req: SimRequest, now: float, turn: int, alpha: float) -> Choice:
    """The chosen instance with the figures the decision rested on (they go on the routing span)."""
    if strategy is Strategy.ROUND_ROBIN:
        engine = candidates[turn % len(candidates)]
        score = float(in_flight[engine.instance])
    elif strategy is Strategy.LEAST_CONN:
        engine = min(candidates, key=lambda e: (in_flight[e.instance], e.instance))
        score = float(in_flight[engine.instance])
    elif strategy is Strategy.EQUAL_COST:
        costs = {e.instance: estimated_finish_s(e, req, now) for e in candidates}
        engine = min(candidates, key=lambda e: (costs[e.instance], e.instance))
        score = costs[engine.instance]
    else:
        def score_of(e: SimEngine) -> float:
            return (in_flight[e.instance] + 1) / cap * (1.0 - alpha * cache_ratio(e, req))

        engine = min(candidates, key=lambda e: (score_of(e), e.instance))
        score = score_of(engine)
    return Choice(engine, score)

"""The gateway's balancing strategies: pick one instance of a pool for one request.

- ``round_robin``: the next instance in turn.
- ``least_conn``: the fewest requests in flight.
- ``equal_cost``: the earliest estimated finish (queue ahead + own prefill + own decode).
- ``cache_aware``: score = load x (1 - alpha x cache ratio), lowest wins; the cache ratio is the
  share of the prompt the instance already holds in its prefix cache. A high alpha chases the
  cache, but the load term keeps growing, so several holders of a hot prefix share its traffic.
- ``prefix_affinity``: the SGLang router's ``cache_aware`` policy (sgl-project/sglang
  ``sgl-router/src/policies/cache_aware.rs`` and ``tree.rs``). The router keeps an approximate
  tree of the prompts it routed to each instance (:class:`PrefixIndex`). While the pool is
  balanced, a request whose prompt matches an instance's tree by more than ``cache_threshold`` goes
  to that instance, whatever its load (the tree answers with one tenant, the same one every time);
  one that does not goes to the instance with the smallest tree. Only when the in-flight loads are
  imbalanced (max - min > ``balance_abs_threshold`` and max > ``balance_rel_threshold`` x min)
  does it route to the least loaded instance. Load counts only past that guard, so one very
  popular prefix stays on one instance up to the guard's margin: a hot spot by design.
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
    PREFIX_AFFINITY = "prefix_affinity"


@dataclass(slots=True)
class Choice:
    engine: SimEngine
    score: float


@dataclass(frozen=True, slots=True)
class Balance:
    """The SGLang router's cache-aware settings (its defaults: router_args.py)."""

    cache_threshold: float = 0.3
    abs_threshold: int = 64
    rel_threshold: float = 1.5


class PrefixIndex:
    """What a router that indexes its own decisions believes each instance holds.

    The SGLang router inserts every routed prompt into its tree for the chosen worker, in both the
    cache-affinity and the load-balancing path; a prompt's shared prefix is held by each instance it
    was ever routed to, and the match names one of them, the same one each time (here the first).
    ``size`` is the tree's per-tenant count: the prompt tokens indexed for the instance.
    """

    def __init__(self) -> None:
        self.holders: dict[str, list[str]] = {}
        self.size: dict[str, int] = {}

    def routed(self, instance: str, req: SimRequest) -> None:
        d = req.draw
        new = d.prompt_tokens
        if d.prefix_tokens:
            holders = self.holders.setdefault(d.prefix, [])
            if instance in holders:
                new -= d.prefix_tokens
            else:
                holders.append(instance)
        self.size[instance] = self.size.get(instance, 0) + new

    def match(self, req: SimRequest) -> list[str]:
        """The instances holding the request's shared prefix, the tree's answer first."""
        d = req.draw
        return self.holders.get(d.prefix, []) if d.prefix_tokens else []


def prefix_affinity(candidates: Sequence[SimEngine], in_flight: dict[str, int], req: SimRequest,
                    index: PrefixIndex, balance: Balance) -> Choice:
    """SGLang router's choice; the score on the routing span is the matched share of the prompt."""
    loads = [in_flight[e.instance] for e in candidates]
    high, low = max(loads), min(loads)
    if high - low > balance.abs_threshold and high > balance.rel_threshold * low:
        engine = min(candidates, key=lambda e: (in_flight[e.instance], e.instance))
        return Choice(engine, 0.0)
    d = req.draw
    ratio = d.prefix_tokens / d.prompt_tokens if d.prefix_tokens else 0.0
    if ratio > balance.cache_threshold:
        by_name = {e.instance: e for e in candidates}
        for instance in index.match(req):
            if instance in by_name:
                return Choice(by_name[instance], ratio)
    engine = min(candidates, key=lambda e: (index.size.get(e.instance, 0), e.instance))
    return Choice(engine, 0.0)


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

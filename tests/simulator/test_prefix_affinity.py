"""prefix_affinity, the SGLang router's cache-aware policy: cache affinity wins over load until the
in-flight loads pass both balance thresholds, and the tree names one instance per prefix."""

from __future__ import annotations

from infersight.config import Config
from infersight.simulator.engine import SimEngine
from infersight.simulator.physics import Physics
from infersight.simulator.request import SimRequest
from infersight.simulator.routing import Balance, PrefixIndex, prefix_affinity
from infersight.simulator.workload import Draw

BALANCE = Balance()  # the router's defaults: threshold 0.3, balance 64 and 1.5


def _engines(n: int) -> list[SimEngine]:
    cap = Config().capacity
    physics = Physics.build(cap.model, cap.gpu_spec())
    return [SimEngine(f"n1:{8000 + i}", "m", "canary", "n1", i, physics) for i in range(n)]


def _request(rid: int, prefix: str = "", prefix_tokens: int = 0, prompt: int = 150) -> SimRequest:
    draw = Draw(prompt + prefix_tokens, 200, prefix or f"u{rid}", prefix_tokens)
    return SimRequest(rid, "m", "canary", "prefix_affinity", draw, 0.0, 0, 90.0)


def _route(engines, in_flight, index, req) -> str:
    pick = prefix_affinity(engines, in_flight, req, index, BALANCE)
    index.routed(pick.engine.instance, req)
    in_flight[pick.engine.instance] += 1
    return pick.engine.instance


def test_a_hot_prefix_stays_on_one_instance_until_the_loads_are_imbalanced():
    engines = _engines(4)
    in_flight = {e.instance: 0 for e in engines}
    index = PrefixIndex()
    first = _route(engines, in_flight, index, _request(0, "handbook", 8000))
    others = [e.instance for e in engines if e.instance != first]
    for i, instance in enumerate(others):  # a few unrelated requests keep the others lightly loaded
        in_flight[instance] = 5 + i
    picks = [_route(engines, in_flight, index, _request(rid, "handbook", 8000)) for rid in range(1, 200)]
    # Every one goes to the first holder while max - min <= 64; past it the least loaded gets one.
    held = picks.index(next(p for p in picks if p != first))
    assert held == 64 + 5 and set(picks[:held]) == {first}
    assert in_flight[first] - min(in_flight[i] for i in others) in (65, 66)
    # The spilled requests made other instances hold the handbook too, but the tree still names the
    # first: the hot spot does not dissolve (the cache-aware score would share among holders).
    assert index.match(_request(999, "handbook", 8000))[0] == first and len(index.match(_request(999, "handbook",
                                                                                                8000))) > 1


def test_relative_threshold_keeps_affinity_on_a_busy_pool():
    """max - min over 64 is not enough while max stays under 1.5 x min (a uniformly busy pool)."""
    engines = _engines(2)
    index = PrefixIndex()
    index.routed(engines[0].instance, _request(0, "doc", 8000))
    in_flight = {engines[0].instance: 200, engines[1].instance: 135}
    assert prefix_affinity(engines, in_flight, _request(1, "doc", 8000), index, BALANCE).engine is engines[0]
    in_flight[engines[1].instance] = 130  # 200 > 1.5 x 130 and 70 > 64: imbalanced
    assert prefix_affinity(engines, in_flight, _request(2, "doc", 8000), index, BALANCE).engine is engines[1]


def test_a_prompt_under_the_cache_threshold_goes_to_the_smallest_tree():
    engines = _engines(3)
    index = PrefixIndex()
    in_flight = {e.instance: 0 for e in engines}
    index.routed(engines[0].instance, _request(0, "sys", 100, prompt=1000))  # 100 of 1100: 9% shared
    index.routed(engines[1].instance, _request(1, prompt=400))
    pick = prefix_affinity(engines, in_flight, _request(2, "sys", 100, prompt=1000), index, BALANCE)
    assert pick.engine is engines[2] and pick.score == 0.0
    unique = prefix_affinity(engines, in_flight, _request(3, prompt=50), index, BALANCE)
    assert unique.engine is engines[2]


def test_a_holder_the_gateway_cannot_use_is_skipped():
    engines = _engines(3)
    index = PrefixIndex()
    for i in (0, 1):
        index.routed(engines[i].instance, _request(i, "doc", 8000))
    in_flight = {e.instance: 0 for e in engines}
    # engines[0] ejected or at its cap: not a candidate; the next holder takes it
    pick = prefix_affinity(engines[1:], in_flight, _request(5, "doc", 8000), index, BALANCE)
    assert pick.engine is engines[1] and pick.score > 0.98

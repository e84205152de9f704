"""Incident events: what a scenario does to the fleet at a given minute.

Each action is one small function; ``params`` are its keyword arguments, checked here so that a
misspelt key in a scenario file is an error rather than an incident that silently never happens.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING

from infersight.simulator.clients import Backoff, ClientPolicy
from infersight.simulator.disaggregation import GB, DecodeEngine
from infersight.simulator.gateway import GatewayPolicy
from infersight.simulator.physics import Physics
from infersight.simulator.routing import PrefixIndex, Strategy
from infersight.simulator.scenario import Event
from infersight.simulator.workload import Lengths

if TYPE_CHECKING:
    from infersight.simulator.engine import SimEngine
    from infersight.simulator.fleet import Fleet


def _targets(fleet: Fleet, event: Event) -> list[SimEngine]:
    engines = [e for e in fleet.engines() if (event.model is None or e.model == event.model)
               and (event.pool is None or e.pool == event.pool)]
    if event.instances is None:
        return engines
    return [engines[i] for i in event.instances if i < len(engines)]


def restart(fleet: Fleet, event: Event, down_s: float = 60.0) -> None:
    """A process restart: in-flight requests break, the instance is back cold after ``down_s``."""
    for engine in _targets(fleet, event):
        fleet.restart(engine, down_s)


def rollout(fleet: Fleet, event: Event, waves: int = 4, wave_interval_s: float = 120.0, down_s: float = 90.0,
            drain_s: float = 60.0, slowdown: float = 1.0, prefill_slowdown: float = 1.0,
            memory_utilization: float | None = None) -> None:
    """A rolling deploy in ``waves``: each wave drains (no new requests for ``drain_s``), then restarts
    into the new build (``slowdown``, ``prefill_slowdown``: its regression; ``memory_utilization``: the
    share of GPU memory it takes for weights and KV cache, when the build changes it)."""
    engines = _targets(fleet, event)
    size = math.ceil(len(engines) / waves)
    physics = None
    if memory_utilization is not None:
        p, cap = fleet.physics, fleet.config.capacity
        physics = Physics.build(p.model, p.gpu, cap.prefill_utilization, memory_utilization)
    for wave in range(waves):
        group = engines[wave * size:(wave + 1) * size]
        fleet.later(wave * wave_interval_s, lambda g=group: _drain(g))
        fleet.later(wave * wave_interval_s + drain_s,
                    lambda g=group: _deploy(fleet, g, down_s, slowdown, prefill_slowdown, physics))


def _drain(engines: list[SimEngine]) -> None:
    for engine in engines:
        engine.draining = True


def _deploy(fleet: Fleet, engines: list[SimEngine], down_s: float, slowdown: float, prefill_slowdown: float,
            physics: Physics | None = None) -> None:
    for engine in engines:  # still draining: the gateway deregistered it until it joins again
        engine.slowdown = slowdown
        engine.prefill_slowdown = prefill_slowdown
        if physics is not None:
            engine.physics = physics
        fleet.restart(engine, down_s)


def add_instances(fleet: Fleet, event: Event, count: int = 1, cold_factor: float = 3.0,
                  warmup_s: float = 180.0) -> None:
    """Scale out: ``count`` new instances join cold (empty prefix cache, uncaptured graphs)."""
    for _ in range(count):
        engine = fleet.add_engine(event.model, event.pool or "stable")
        engine.cold_factor, engine.warmup_s = cold_factor, warmup_s


def rate(fleet: Fleet, event: Event, factor: float = 1.0, over_minutes: float = 0.0) -> None:
    """Demand changes to ``factor`` x the workload's rate, linearly over ``over_minutes``."""
    for model, traffic in fleet.traffic.items():
        if event.model is None or model == event.model:
            fleet.ramp(traffic, over_minutes, factor)


def network_jitter(fleet: Fleet, event: Event, error_share: float = 0.3, delay_s: float = 0.5) -> None:
    """The network to a host drops ``error_share`` of connections and delays the rest by ``delay_s``."""
    for engine in _targets(fleet, event):
        engine.network_jitter, engine.network_delay_s = error_share, delay_s


def prefix_change(fleet: Fleet, event: Event, shared_share: float = 0.05) -> None:
    """A new system prompt: old cached prefixes are useless, and only ``shared_share`` of prompts still share one."""
    for model, traffic in fleet.traffic.items():
        if event.model is None or model == event.model:
            traffic.prefix_version += 1
            traffic.shared_share = shared_share


def gpu_off_bus(fleet: Fleet, event: Event) -> None:
    """XID 79: the GPU is gone, and the engine on it dies for good."""
    for engine in _targets(fleet, event):
        fleet.node_of(engine).gpus.gpu(engine.gpu).fall_off_bus()
        fleet.restart(engine, math.inf)


def strategy(fleet: Fleet, event: Event, name: str = "cache_aware", cache_alpha: float | None = None,
             cache_threshold: float | None = None, balance_abs_threshold: int | None = None,
             balance_rel_threshold: float | None = None) -> None:
    """The pool's balancing strategy changes (a canary of a new router policy); the other parameters
    are the gateway's settings for it (see :class:`GatewayPolicy`). A new router starts with an empty
    prefix index."""
    for pool in fleet.gateway.pools:
        if (event.model is None or pool.model == event.model) and (event.pool is None or pool.name == event.pool):
            pool.strategy = Strategy(name)
            pool.index = PrefixIndex()
    settings = {"cache_alpha": cache_alpha, "cache_threshold": cache_threshold,
                "balance_abs_threshold": balance_abs_threshold, "balance_rel_threshold": balance_rel_threshold}
    update = {k: v for k, v in settings.items() if v is not None}
    if update:
        fleet.gateway.policy = GatewayPolicy.model_validate({**fleet.gateway.policy.model_dump(), **update})


def lengths(fleet: Fleet, event: Event, prompt_median: int | None = None, output_median: int | None = None) -> None:
    """Requests get longer (a new long-context feature, an agent loop)."""
    for model, traffic in fleet.traffic.items():
        if event.model is None or model == event.model:
            w = traffic.w
            update = {}
            if prompt_median:
                update["prompt_tokens"] = Lengths(median=prompt_median, sigma=w.prompt_tokens.sigma,
                                                  max=max(w.prompt_tokens.max, 4 * prompt_median))
            if output_median:
                update["output_tokens"] = Lengths(median=output_median, sigma=w.output_tokens.sigma,
                                                  max=max(w.output_tokens.max, 4 * output_median))
            traffic.w = w.model_copy(update=update)


def clients(fleet: Fleet, event: Event, backoff: str | None = None, max_retries: int | None = None) -> None:
    update = {}
    if backoff is not None:
        update["backoff"] = Backoff(backoff)
    if max_retries is not None:
        update["max_retries"] = max_retries
    fleet.clients.policy = ClientPolicy.model_validate({**fleet.clients.policy.model_dump(), **update})


def kv_link(fleet: Fleet, event: Event, gb_s: float = 40.0) -> None:
    """The decode instances' KV links now carry ``gb_s`` (an RDMA path falling back to TCP, a congested fabric)."""
    for engine in _targets(fleet, event):
        if isinstance(engine, DecodeEngine):
            engine.link.bytes_per_s = gb_s * GB


ACTIONS = {f.__name__: f for f in (restart, rollout, add_instances, rate, network_jitter, prefix_change, gpu_off_bus,
                                   strategy, lengths, clients, kv_link)}


def check(event: Event) -> None:
    """Refuse parameters the action does not take."""
    allowed = list(inspect.signature(ACTIONS[event.action]).parameters)[2:]
    unknown = sorted(set(event.params) - set(allowed))
    if unknown:
        raise ValueError(f"event {event.action!r} at minute {event.at_minute:g}: unknown parameter(s) "
                         f"{', '.join(unknown)}; it takes {', '.join(allowed) or 'none'}")


def apply(fleet: Fleet, event: Event) -> None:
    check(event)
    ACTIONS[event.action](fleet, event, **event.params)

"""The simulated gateway: pools, routing, concurrency caps, a bounded queue, health checks, ejection.

Each model has pools (stable, canary ...), each with its own strategy. An instance takes at most
``max_in_flight`` requests; beyond that requests wait in the pool's queue, and beyond
``queue_limit`` they are turned away with a 503. Active health checks probe each instance every
``health_interval_s``: a probe fails when the instance is down or the network to it drops the
probe, and, where the gateway probes with a tiny completion (``probe_timeout_s``), when its first
token would come later than that. ``fail_threshold`` failures in a row
eject it; a passing probe after ``eject_s`` makes it half-open (a trickle of traffic), and
``recover_checks`` passing probes bring it back; a failure while half-open ejects it again.
A broken attempt is retried once on another instance by the gateway itself.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from infersight.attributes import Outcome, TimeoutKind, UpstreamError
from infersight.simulator.engine import SimEngine
from infersight.simulator.gateway_metrics import GatewayMetrics
from infersight.simulator.request import SimRequest
from infersight.simulator.routing import Balance, PrefixIndex, Strategy, choose, prefix_affinity

HEALTHY, COLD, HALF_OPEN, EJECTED = "healthy", "cold", "half_open", "ejected"
CONNECT_TIMEOUT_S = 2.0  # a dropped connection shows after this long


class GatewayPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_in_flight: int = Field(160, gt=0, description="requests one instance may have in flight")
    queue_limit: int = Field(400, ge=0, description="requests one pool's queue holds before 503s")
    request_timeout_s: float = Field(90.0, gt=0, description="the gateway gives up on a request after this")
    health_interval_s: float = Field(5.0, gt=0)
    probe_timeout_s: float | None = Field(
        None, gt=0, description="probe with a tiny completion whose first token must come within this; "
                                "None: probe /health, which answers while the engine lives, however loaded")
    fail_threshold: int = Field(3, gt=0)
    eject_s: float = Field(30.0, gt=0)
    recover_checks: int = Field(2, gt=0)
    half_open_share: float = Field(0.1, ge=0, le=1)
    warm_after_s: float = Field(300.0, ge=0, description="a new instance counts as cold this long")
    gateway_retries: int = Field(1, ge=0, description="re-attempts on another instance after a broken attempt")
    cache_alpha: float = Field(0.5, ge=0, le=1, description="cache-aware routing weight of the cache ratio")
    # prefix_affinity (the SGLang router's cache-aware policy), with that router's defaults
    cache_threshold: float = Field(0.3, ge=0, le=1, description="prefix_affinity: a prompt matching an instance's "
                                                                "tree by more than this share goes there")
    balance_abs_threshold: int = Field(64, ge=0, description="prefix_affinity: load-balance when max - min in-flight "
                                                             "exceeds this (and the relative threshold too)")
    balance_rel_threshold: float = Field(1.5, ge=1, description="prefix_affinity: ... and max exceeds this x min")

    def balance(self) -> Balance:
        return Balance(self.cache_threshold, self.balance_abs_threshold, self.balance_rel_threshold)


@dataclass
class Pool:
    model: str
    name: str
    strategy: Strategy
    engines: list[SimEngine]
    weight: float = 1.0
    queue: deque = field(default_factory=deque)
    turn: int = 0
    index: PrefixIndex = field(default_factory=PrefixIndex)  # prefix_affinity's tree of what it routed


@dataclass
class InstanceHealth:
    state: str
    failures: int = 0
    passes: int = 0
    ejected_at: float = 0.0


class Gateway:
    """Routes requests for every model; ``done(req, outcome)`` hands results back to the clients."""

    def __init__(self, pools: list[Pool], policy: GatewayPolicy, metrics: GatewayMetrics, rng: random.Random,
                 done: Callable[[SimRequest, str, float], None]):
        self.pools = pools
        self.policy = policy
        self.metrics = metrics
        self.rng = rng
        self.done = done
        self.in_flight: dict[str, int] = {}
        self.health: dict[str, InstanceHealth] = {}
        self.pool_of: dict[str, Pool] = {}
        self.engines: dict[str, SimEngine] = {}
        self._breaks: list[tuple[float, int, SimRequest]] = []  # attempts that will fail (dropped connections)
        self._deadlines: list[tuple[float, int, SimRequest]] = []
        self._active: dict[int, SimRequest] = {}
        self._next_check = 0.0
        for pool in pools:
            for engine in pool.engines:
                self.pool_of[engine.instance] = pool
                self.engines[engine.instance] = engine
                self.in_flight[engine.instance] = 0

    # -- instances ----------------------------------------------------------------------------------
    def join(self, engine: SimEngine, now: float, start_time: float, cold: bool = True) -> None:
        """An instance (new or restarted) registers with the gateway; ``start_time`` is its Unix start time."""
        state = COLD if cold else HEALTHY
        self.health[engine.instance] = InstanceHealth(state)
        self.metrics.health.instance_started(engine.instance, model=engine.model, pool=engine.pool,
                                             start_time=start_time, state=state)

    def add(self, pool: Pool, engine: SimEngine, now: float, start_time: float) -> None:
        pool.engines.append(engine)
        self.pool_of[engine.instance] = pool
        self.engines[engine.instance] = engine
        self.in_flight[engine.instance] = 0
        self.join(engine, now, start_time)

    def _set(self, engine: SimEngine, state: str) -> None:
        self.health[engine.instance].state = state
        self.metrics.health.set_state(engine.instance, state, model=engine.model, pool=engine.pool)

    def pools_for(self, model: str) -> list[Pool]:
        return [p for p in self.pools if p.model == model]

    def pick_pool(self, model: str) -> Pool:
        pools = self.pools_for(model)
        total = sum(p.weight for p in pools)
        x = self.rng.random() * total
        for pool in pools:
            x -= pool.weight
            if x <= 0:
                return pool
        return pools[-1]

    # -- requests -----------------------------------------------------------------------------------
    def arrive(self, req: SimRequest, now: float) -> None:
        self.metrics.started(req)
        self._active[req.id] = req
        heapq.heappush(self._deadlines, (req.arrival + self.policy.request_timeout_s, req.id, req))
        pool = self.pool_of_request(req)
        if not pool.queue and self._route(req, pool, now):
            return
        if len(pool.queue) >= self.policy.queue_limit:
            self._end(req, Outcome.REJECTED, now, rejection_reason="queue_full")
            return
        req.queued_at = now
        self.metrics.queued(req)
        pool.queue.append(req)

    def pool_of_request(self, req: SimRequest) -> Pool:
        return next(p for p in self.pools if p.model == req.model and p.name == req.pool)

    def _candidates(self, pool: Pool, exclude: str = "") -> list[SimEngine]:
        cap = self.policy.max_in_flight
        out = []
        for e in pool.engines:
            h = self.health.get(e.instance)
            if h is None or e.draining or e.instance == exclude or self.in_flight[e.instance] >= cap:
                continue
            if h.state in (HEALTHY, COLD) or (h.state == HALF_OPEN and self.rng.random() < self.policy.half_open_share):
                out.append(e)
        return out

    def _route(self, req: SimRequest, pool: Pool, now: float, exclude: str = "") -> bool:
        candidates = self._candidates(pool, exclude)
        if not candidates:
            return False
        if pool.strategy is Strategy.PREFIX_AFFINITY:
            pick = prefix_affinity(candidates, self.in_flight, req, pool.index, self.policy.balance())
            pool.index.routed(pick.engine.instance, req)
        else:
            pick = choose(pool.strategy, candidates, self.in_flight, self.policy.max_in_flight, req, now, pool.turn,
                          self.policy.cache_alpha)
        pool.turn += 1
        engine = pick.engine
        self.metrics.routed(req, engine.instance, now)
        self.in_flight[engine.instance] += 1
        req.attempt_at = now
        if not engine.up:
            self._broken(req, now, UpstreamError.UNREACHABLE)  # connection refused, at once
        elif engine.network_jitter and self.rng.random() < engine.network_jitter:
            req.fail_at = now + CONNECT_TIMEOUT_S
            heapq.heappush(self._breaks, (req.fail_at, req.id, req))
        else:
            req.extra_latency = engine.network_delay_s
            engine.submit(req, now)
        return True

    def _broken(self, req: SimRequest, now: float, error: UpstreamError) -> None:
        """The attempt broke (refused, reset, dropped): retry once elsewhere, else fail."""
        self.in_flight[req.instance] -= 1
        if req.failed_attempts is None:
            req.failed_attempts = []
        # a dropped connection broke at its fail_at; the gateway notices (and re-attempts) at its tick
        req.failed_attempts.append((req.instance, req.attempt_at, req.fail_at if req.fail_at is not None else now,
                                    error))
        req.fail_at = None
        if req.gateway_attempt < self.policy.gateway_retries:
            req.gateway_attempt += 1
            self.metrics.retried(req)
            pool = self.pool_of_request(req)
            if self._route(req, pool, now, exclude=req.instance):
                return
        self._end(req, Outcome.ERROR, now)

    def engine_lost(self, lost: list[SimRequest], now: float) -> None:
        for req in lost:
            if req.id in self._active:
                self._broken(req, now, UpstreamError.DISCONNECTED)  # the engine died mid-request

    def finished(self, req: SimRequest) -> None:
        if req.id not in self._active:
            return
        self.in_flight[req.instance] -= 1
        now = req.done_at + req.extra_latency
        ttft = req.first_token - req.arrival + req.extra_latency
        self._end(req, Outcome.SUCCESS, now, ttft_s=ttft, tokens=req.draw.output_tokens, gap_s=req.step_s)

    def _end(self, req: SimRequest, outcome: Outcome, now: float, **kw) -> None:
        self._active.pop(req.id, None)
        self.metrics.ended(req, outcome, now, **kw)
        self.done(req, outcome, now)

    # -- every tick ---------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        while self._breaks and self._breaks[0][0] <= now:
            _, rid, req = heapq.heappop(self._breaks)
            if rid in self._active and req.fail_at is not None:
                self._broken(req, now, UpstreamError.UNREACHABLE)  # the dropped connection timed out
        while self._deadlines and self._deadlines[0][0] <= now:
            _, rid, req = heapq.heappop(self._deadlines)
            if rid in self._active:
                self._timeout(req, now)
        for pool in self.pools:
            while pool.queue:
                req = pool.queue[0]
                if req.id not in self._active:
                    pool.queue.popleft()
                    continue
                if not self._route(req, pool, now):
                    break
                pool.queue.popleft()
        if now >= self._next_check:
            self._next_check = now + self.policy.health_interval_s
            self._health_checks(now)

    def _timeout(self, req: SimRequest, now: float) -> None:
        if req.routed_at is not None and req.fail_at is None and req.instance:
            engine = self.engines[req.instance]
            engine.abort(req)
            self.in_flight[req.instance] -= 1
        elif req.fail_at is not None:
            self.in_flight[req.instance] -= 1
            req.fail_at = None
        started = req.first_token is not None and req.first_token + req.extra_latency <= now
        kind = TimeoutKind.TOTAL if started else TimeoutKind.TTFT
        tokens = 0
        if started:
            tokens = max(1, int((now - req.first_token) / max(req.step_s, 1e-3)))
        self._end(req, Outcome.TIMEOUT, now, ttft_s=(req.first_token - req.arrival) if started else None,
                  tokens=min(tokens, req.draw.output_tokens), gap_s=req.step_s, timeout_kind=kind)

    def _probe(self, engine: SimEngine, now: float) -> bool:
        if not engine.up:
            return False
        if engine.network_jitter and self.rng.random() < engine.network_jitter:
            return False
        limit = self.policy.probe_timeout_s
        return limit is None or engine.probe_seconds(now) + engine.network_delay_s <= limit

    def _health_checks(self, now: float) -> None:
        p = self.policy
        for instance, h in self.health.items():
            engine = self.engines[instance]
            if engine.draining:
                # a deploy deregistered it: the gateway neither probes nor ejects it until it joins again
                continue
            ok = self._probe(engine, now)
            self.metrics.health.health_check(instance, ok, model=engine.model, pool=engine.pool)
            if h.state == EJECTED:
                # back on trial only once it answers again: a dead host stays ejected, it does not flap
                if ok and now - h.ejected_at >= p.eject_s:
                    self._set(engine, HALF_OPEN)
                    h.passes = 0
                continue
            if ok:
                h.failures = 0
                h.passes += 1
                if h.state == HALF_OPEN and h.passes >= p.recover_checks:
                    self._set(engine, HEALTHY)  # back in full rotation
                elif h.state == COLD and now - engine.started_at >= p.warm_after_s:
                    self._set(engine, HEALTHY)
            else:
                h.passes = 0
                h.failures += 1
                if h.state == HALF_OPEN or h.failures >= p.fail_threshold:
                    self._set(engine, EJECTED)
                    h.ejected_at = now
                    h.failures = 0

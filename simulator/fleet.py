"""The whole simulated fleet: engines on nodes of 8 simulated GPUs, the gateway, clients, traffic.

``Fleet.run_until(t)`` advances in 2-second ticks on its own clock (virtual time: it only moves
when told; :mod:`.realtime` tells it to keep pace with the wall clock). ``wall(t)`` is the Unix time
that simulated second ``t`` stands for: ``epoch + t / speed`` (speed 1 in virtual time; the
real-time demo runs 60 simulated seconds per real one). Each engine is named ``host:port``
(DESIGN 10) and has one GPU; its load drives that GPU in the GPU collector's simulated backend.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from infersight.capacity import GPU_PRESETS
from infersight.collectors.gpu.sim import ManualClock, SimBackend
from infersight.config import Config
from infersight.simulator import formats
from infersight.simulator.clients import Clients
from infersight.simulator.disaggregation import DecodeEngine, Disaggregation, PrefillEngine
from infersight.simulator.engine import SimEngine
from infersight.simulator.events import apply, check
from infersight.simulator.gateway import Gateway, Pool
from infersight.simulator.gateway_metrics import GatewayMetrics
from infersight.simulator.physics import Physics
from infersight.simulator.request import SimRequest
from infersight.simulator.scenario import Event, PoolSpec, Scenario
from infersight.simulator.workload import Traffic

GPUS_PER_NODE = 8
ENGINE_PORT = 8000
TICK_S = 2.0  # routing and health act per tick; times inside a tick stay exact
_seq = itertools.count()


@dataclass
class Node:
    name: str
    gpus: SimBackend
    used: int = 0


class Fleet:
    def __init__(self, scenario: Scenario, config: Config, epoch: float = 0.0, speed: float = 1.0):
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.scenario = scenario
        self.config = config
        self.epoch = epoch  # Unix time of t = 0 (0 for promtool, whose clock starts at 1970)
        self.speed = speed  # simulated seconds per wall-clock second
        self.clock = ManualClock(0.0)
        self.rng = random.Random(scenario.seed)
        cap = config.capacity
        gpu = cap.gpu_spec() if scenario.gpu_type == cap.gpu else GPU_PRESETS[scenario.gpu_type]
        self.physics = Physics.build(cap.model, gpu, cap.prefill_utilization)
        self.nodes: list[Node] = []
        self.metrics = GatewayMetrics(seed=scenario.seed)
        self.clients = Clients(scenario.clients, random.Random(scenario.seed + 1))
        self.traffic = {w.model: Traffic(w, random.Random(f"{scenario.seed}/{w.model}")) for w in scenario.workload}
        pools = []
        self.pool_engine: dict[tuple[str, str], str] = {}  # (model, pool) -> the engine its instances run
        self.pool_physics: dict[tuple[str, str], Physics] = {}  # pools whose engines keep another memory share
        self.prefill_engines: list[SimEngine] = []  # disaggregated pools' prefill side (not behind the gateway)
        for fleet_model in scenario.fleet:
            for spec in fleet_model.pools:
                self.pool_engine[(fleet_model.name, spec.name)] = spec.engine
                if spec.memory_utilization != PoolSpec.model_fields["memory_utilization"].default:
                    self.pool_physics[(fleet_model.name, spec.name)] = Physics.build(
                        cap.model, gpu, cap.prefill_utilization, spec.memory_utilization)
                if spec.prefill_instances:
                    pd = Disaggregation(self.pool_physics.get((fleet_model.name, spec.name), self.physics))
                    pd.prefill_engines = [self._new_engine(fleet_model.name, spec.name, PrefillEngine, pd=pd)
                                          for _ in range(spec.prefill_instances)]
                    self.prefill_engines += pd.prefill_engines
                    engines = [self._new_engine(fleet_model.name, spec.name, DecodeEngine, pd=pd,
                                                link_gb_s=spec.kv_link_gb_s) for _ in range(spec.instances)]
                else:
                    engines = [self._new_engine(fleet_model.name, spec.name) for _ in range(spec.instances)]
                pools.append(Pool(fleet_model.name, spec.name, spec.strategy, engines, spec.weight))
        self.gateway = Gateway(pools, scenario.gateway, self.metrics, random.Random(scenario.seed + 2),
                               self.clients.done)
        for engine in self.prefill_engines:
            engine.start(0.0, cold=False)
        for engine in self.gateway_engines():
            engine.start(0.0, cold=False)
            self.gateway.join(engine, 0.0, self.wall(0.0), cold=False)
        self.events: list[Event] = sorted(scenario.events, key=lambda e: e.at_minute)
        for event in self.events:
            check(event)
        self._later: list[tuple[float, int, Callable[[], None]]] = []
        self._restarts: list[SimEngine] = []
        self._ramps: list[tuple[Traffic, float, float, float, float]] = []  # traffic, t0, t1, from, to
        self.now = 0.0

    def wall(self, t: float) -> float:
        """The Unix time simulated second ``t`` stands for (start-time gauges carry it)."""
        return self.epoch + t / self.speed

    # -- building ---------------------------------------------------------------------------------
    def _new_engine(self, model: str, pool: str, cls: type[SimEngine] = SimEngine, **kw) -> SimEngine:
        if not self.nodes or self.nodes[-1].used == GPUS_PER_NODE:
            name = f"sim-n{len(self.nodes) + 1:02d}"
            self.nodes.append(Node(name, SimBackend(GPUS_PER_NODE, self.scenario.gpu_type, clock=self.clock,
                                                    node=name)))
        node = self.nodes[-1]
        gpu = node.used
        node.used += 1
        kind = self.pool_engine.get((model, pool), formats.DEFAULT)
        physics = self.pool_physics.get((model, pool), self.physics)
        return cls(f"{node.name}:{ENGINE_PORT + gpu}", model, pool, node.name, gpu, physics, kind=kind,
                   bounds=formats.bounds(kind), **kw)

    def add_engine(self, model: str, pool: str) -> SimEngine:
        engine = self._new_engine(model, pool)
        engine.start(self.now, cold=True)
        target = next(p for p in self.gateway.pools if p.model == model and p.name == pool)
        self.gateway.add(target, engine, self.now, self.wall(self.now))
        return engine

    def gateway_engines(self) -> list[SimEngine]:
        return [e for pool in self.gateway.pools for e in pool.engines] if hasattr(self, "gateway") else []

    def engines(self) -> list[SimEngine]:
        """Every engine; prefill instances first, so that a tick hands their prompts to the decode side in time."""
        return [*getattr(self, "prefill_engines", ()), *self.gateway_engines()]

    def node_of(self, engine: SimEngine) -> Node:
        return next(n for n in self.nodes if n.name == engine.node)

    def restart(self, engine: SimEngine, down_s: float) -> None:
        self.gateway.engine_lost(engine.crash(self.now, down_s), self.now)
        if math.isfinite(down_s):
            self._restarts.append(engine)

    def later(self, delay_s: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._later, (self.now + delay_s, next(_seq), action))

    def ramp(self, traffic: Traffic, minutes: float, to: float) -> None:
        self._ramps.append((traffic, self.now, self.now + 60 * minutes, traffic.rate_factor, to))

    # -- running ----------------------------------------------------------------------------------
    def run_until(self, t_end: float) -> None:
        while self.now + TICK_S <= t_end + 1e-9:
            self._tick()

    def _tick(self) -> None:
        t0, t1 = self.now, self.now + TICK_S
        while self.events and self.events[0].at_minute * 60 <= t0:
            apply(self, self.events.pop(0))
        while self._later and self._later[0][0] <= t0:
            heapq.heappop(self._later)[2]()
        for engine in list(self._restarts):
            if t0 >= engine.down_until:
                self._restarts.remove(engine)
                engine.start(t0, cold=True)
                engine.draining = False
                if engine.instance in self.gateway.engines:  # a prefill instance is not behind the gateway
                    self.gateway.join(engine, t0, self.wall(t0), cold=True)
        for traffic, r0, r1, a, b in list(self._ramps):
            share = min(1.0, (t0 - r0) / (r1 - r0)) if r1 > r0 else 1.0
            traffic.rate_factor = a + (b - a) * share
            if share >= 1.0:
                self._ramps.remove((traffic, r0, r1, a, b))
        if int(t0) % 60 == 0:
            for traffic in self.traffic.values():
                traffic.wander()
        arrivals: list[SimRequest] = []
        for model, traffic in self.traffic.items():
            for at in traffic.arrivals(t0, TICK_S):
                pool = self.gateway.pick_pool(model)
                arrivals.append(SimRequest(self.clients.next_id(), model, pool.name, pool.strategy.value,
                                           traffic.draw(), at, 0, at))
        arrivals += self.clients.due(t1)
        arrivals.sort(key=lambda r: r.arrival)
        for req in arrivals:
            self.gateway.arrive(req, req.arrival)
        self.gateway.tick(t0)
        for engine in self.engines():
            for req in engine.advance(t0, t1):
                self.gateway.finished(req)
        self.now = t1
        self.clock.now = t1
        for engine in self.engines():
            self.node_of(engine).gpus.set_load(engine.gpu, engine.compute_share, engine.bandwidth_share)

"""Scenario files: a fleet, its traffic, the incident as timed events, and the alerts it must trip.

Magnitudes come from the incident account quoted in ``story`` (rates, latencies, counts), never
from an alert's threshold plus a margin: the alert-quality test then says whether our rules catch
the incident as it happened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infersight.alerts.model import Severity
from infersight.simulator.clients import ClientPolicy
from infersight.simulator.formats import FORMATS
from infersight.simulator.gateway import GatewayPolicy
from infersight.simulator.routing import Strategy
from infersight.simulator.workload import Workload

SCENARIO_DIR = Path(__file__).parent / "scenarios"


class ScenarioError(ValueError):
    """A scenario file that cannot run; the message names the file and the key."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PoolSpec(Strict):
    name: str = "stable"
    instances: int = Field(gt=0, le=512)
    strategy: Strategy = Strategy.LEAST_CONN
    weight: float = Field(1.0, gt=0, description="share of the model's traffic, relative to its other pools")
    engine: str = Field("vllm", description="the engine its instances run: the /metrics they serve (vllm, sglang)")
    memory_utilization: float = Field(
        0.9, gt=0, le=1, description="share of GPU memory the engine takes for weights and KV cache (vLLM "
                                     "--gpu-memory-utilization, SGLang --mem-fraction-static)")
    prefill_instances: int = Field(
        0, ge=0, le=512, description="> 0: disaggregated: `instances` decode instances behind the gateway, this "
                                     "many prefill instances, the KV cache read over each decode's link")
    kv_link_gb_s: float = Field(40.0, gt=0, description="a decode instance's bandwidth for KV reads, GB/s")

    @model_validator(mode="after")
    def _disaggregated_on_vllm(self) -> PoolSpec:
        if self.prefill_instances and self.engine != "vllm":
            raise ValueError("prefill_instances: disaggregated pools are simulated on vllm (its NIXL KV connector)")
        return self

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in FORMATS:
            raise ValueError(f"engine {value!r} is not simulated; simulated: {', '.join(FORMATS)}")
        return value


class ModelFleet(Strict):
    name: str
    pools: list[PoolSpec]


class Event(Strict):
    """One thing that happens at ``at_minute``; ``action`` says what, the other keys how."""

    at_minute: float = Field(ge=0)
    action: Literal["restart", "rollout", "add_instances", "rate", "network_jitter", "prefix_change",
                    "gpu_off_bus", "strategy", "lengths", "clients", "kv_link"]
    model: str | None = None
    pool: str | None = None
    instances: list[int] | None = Field(None, description="indices into the model's pool (or all its instances)")
    params: dict[str, Any] = Field(default_factory=dict)


class Expect(Strict):
    alert: str
    severity: Severity
    within_minutes: float = Field(gt=0, description="must fire within this many minutes after onset")
    known_failure: str | None = Field(None, description="why our rule misses this today (an xfail, strict)")


class Allowance(Strict):
    """An alert that fires in this scenario although the scenario does not require it, and why."""

    alert: str
    severity: Severity
    reason: str


class Scenario(Strict):
    name: str
    title: str
    story: str = Field(description="the incident account, with the magnitudes this scenario reproduces")
    minutes: int = Field(gt=0, le=24 * 60)
    onset_minute: float | None = Field(None, ge=0, description="when the incident starts (None: healthy)")
    seed: int = 1
    gpu_type: str = "H100-SXM"
    fleet: list[ModelFleet]
    workload: list[Workload]
    gateway: GatewayPolicy = GatewayPolicy()
    clients: ClientPolicy = ClientPolicy()
    events: list[Event] = Field(default_factory=list)
    expect: list[Expect] = Field(default_factory=list)
    may_fire: list[Allowance] = Field(default_factory=list, description="legitimate consequences, not required")
    magnitudes: dict[str, Any] = Field(default_factory=dict, description="what the incident looked like")
    quiet_models: list[str] = Field(
        default_factory=list, description="models the incident does not touch: nothing may fire for them")
    quiet_pools: list[str] = Field(
        default_factory=list, description="pools the incident does not touch (stable beside a canary): nothing "
                                         "may fire for them")

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        models = {m.name for m in self.fleet}
        for w in self.workload:
            if w.model not in models:
                raise ValueError(f"workload for {w.model!r}, which the fleet does not serve ({', '.join(models)})")
        for m in self.quiet_models:
            if m not in models:
                raise ValueError(f"quiet_models names {m!r}, which the fleet does not serve ({', '.join(models)})")
        pools = {p.name for m in self.fleet for p in m.pools}
        for p in self.quiet_pools:
            if p not in pools:
                raise ValueError(f"quiet_pools names {p!r}, which the fleet does not have ({', '.join(sorted(pools))})")
        if self.expect and self.onset_minute is None:
            raise ValueError("a scenario that expects alerts needs onset_minute")
        for e in self.events:
            if e.model is not None and e.model not in models:
                raise ValueError(f"event at minute {e.at_minute:g} names model {e.model!r}, not in the fleet")
            if e.at_minute > self.minutes:
                raise ValueError(f"event at minute {e.at_minute:g} is after the end ({self.minutes})")
        return self


def load(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise ScenarioError(f"{path}: {problems}") from None


def builtin() -> dict[str, Path]:
    """The scenarios shipped with infersight, by name."""
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.yaml"))}


def find(name_or_path: str) -> Scenario:
    known = builtin()
    if name_or_path in known:
        return load(known[name_or_path])
    if Path(name_or_path).is_file():
        return load(name_or_path)
    raise ScenarioError(f"no scenario {name_or_path!r}; built in: {', '.join(known)} (or give a YAML file's path)")

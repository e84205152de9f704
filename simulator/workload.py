"""What clients send: arrival rate over the day, prompt and output lengths, shared prefixes.

Lengths are lognormal around their medians (chat traffic has a long right tail). A share of
requests starts with one of a few shared prefixes (system prompts, documents) that an instance's
prefix cache can hold; the rest start with something unique to the request.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class Lengths(BaseModel):
    model_config = ConfigDict(extra="forbid")
    median: int = Field(gt=0)
    sigma: float = Field(0.6, ge=0, le=2, description="lognormal shape: 0 is constant")
    max: int = Field(8192, gt=0)

    def draw(self, rng: random.Random) -> int:
        value = self.median * math.exp(rng.gauss(0.0, self.sigma)) if self.sigma else self.median
        return max(1, min(self.max, int(value)))


class SharedPrefix(BaseModel):
    model_config = ConfigDict(extra="forbid")
    share: float = Field(0.7, ge=0, le=1, description="share of requests starting with a shared prefix")
    tokens: int = Field(1024, ge=0, description="length of each shared prefix")
    groups: int = Field(4, gt=0, description="how many distinct shared prefixes there are")
    skew: float = Field(0.0, ge=0, le=4, description="popularity of the prefixes: group k is drawn in proportion to "
                                                     "1 / (k + 1) ** skew (0: all alike; 1: Zipf, one hot document)")


class Diurnal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trough: float = Field(1.0, gt=0, le=1, description="rate at the quietest hour as a share of the peak")
    peak_hour: float = Field(14.0, ge=0, lt=24, description="hour of day of the peak")
    start_hour: float = Field(14.0, ge=0, lt=24, description="hour of day the simulation starts at")


class Workload(BaseModel):
    """The traffic of one model."""

    model_config = ConfigDict(extra="forbid")
    model: str
    rate_per_s: float = Field(gt=0, description="arrival rate at the daily peak, requests per second")
    noise: float = Field(0.05, ge=0, le=1, description="minute-to-minute wander of the rate (share)")
    diurnal: Diurnal = Diurnal()
    prompt_tokens: Lengths = Lengths(median=1200)
    output_tokens: Lengths = Lengths(median=300)
    shared_prefix: SharedPrefix = SharedPrefix()


@dataclass(slots=True)
class Draw:
    prompt_tokens: int
    output_tokens: int
    prefix: str  # prefix-cache key; unique per request when not shared
    prefix_tokens: int


class Traffic:
    """Arrivals of one model's workload; ``rate_factor`` is what incident events change."""

    def __init__(self, workload: Workload, rng: random.Random):
        self.w = workload
        self.rng = rng
        self.rate_factor = 1.0
        self.prefix_version = 0  # a system-prompt change makes new prefixes
        self.shared_share = workload.shared_prefix.share
        self._wander = 1.0
        self._unique = 0
        self._groups = range(workload.shared_prefix.groups)
        self._weights = [1.0 / (k + 1) ** workload.shared_prefix.skew for k in self._groups]

    def rate(self, t: float) -> float:
        d = self.w.diurnal
        hour = (d.start_hour + t / 3600.0) % 24
        shape = 0.5 * (1 + math.cos(2 * math.pi * (hour - d.peak_hour) / 24))  # 1 at the peak, 0 opposite
        return self.w.rate_per_s * (d.trough + (1 - d.trough) * shape) * self._wander * self.rate_factor

    def wander(self) -> None:
        """Once a minute: a mean-reverting random walk of the rate (real traffic is never smooth)."""
        self._wander += 0.3 * (1.0 - self._wander) + self.rng.gauss(0.0, self.w.noise)
        self._wander = min(1.5, max(0.5, self._wander))

    def arrivals(self, t: float, dt: float) -> list[float]:
        """Arrival times in [t, t + dt): a Poisson process at the current rate."""
        rate = self.rate(t)
        times, now = [], t
        while True:
            now += self.rng.expovariate(rate) if rate > 0 else dt
            if now >= t + dt:
                return times
            times.append(now)

    def draw(self) -> Draw:
        sp = self.w.shared_prefix
        prompt = self.w.prompt_tokens.draw(self.rng)
        output = self.w.output_tokens.draw(self.rng)
        if sp.tokens and self.rng.random() < self.shared_share:
            group = self.rng.choices(self._groups, self._weights)[0] if sp.skew else self.rng.randrange(sp.groups)
            return Draw(prompt + sp.tokens, output, f"{self.w.model}/v{self.prefix_version}/{group}", sp.tokens)
        self._unique += 1
        return Draw(prompt, output, f"u{self._unique}", 0)

"""Clients: they send the workload, and when a request fails they retry it as a new request.

A retry is a new request to the gateway carrying the same prompt and the retry count in the
header real SDKs send (OpenAI's SDKs: ``x-stainless-retry-count``). With exponential backoff
(OpenAI's SDK default: 0.5 s doubling to 8 s, with jitter, 2 retries) a burst of failures spreads
out; without it every failure comes straight back, on top of the traffic that caused it.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import random

from pydantic import BaseModel, ConfigDict, Field

from infersight.attributes import Outcome
from infersight.simulator.request import SimRequest

RETRYABLE = (Outcome.REJECTED, Outcome.ERROR, Outcome.TIMEOUT)


class Backoff(enum.StrEnum):
    EXPONENTIAL = "exponential"
    NONE = "none"


class ClientPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_retries: int = Field(2, ge=0, le=10)
    backoff: Backoff = Backoff.EXPONENTIAL
    initial_backoff_s: float = Field(0.5, ge=0)
    max_backoff_s: float = Field(8.0, ge=0)


class Clients:
    def __init__(self, policy: ClientPolicy, rng: random.Random):
        self.policy = policy
        self.rng = rng
        self._ids = itertools.count(1)
        self._retries: list[tuple[float, int, SimRequest]] = []
        self.sent = 0
        self.retried = 0

    def next_id(self) -> int:
        return next(self._ids)

    def delay(self, attempt: int) -> float:
        p = self.policy
        if p.backoff is Backoff.NONE:
            return self.rng.uniform(0.0, 0.1)  # straight back
        base = min(p.max_backoff_s, p.initial_backoff_s * 2 ** attempt)
        return base * (1 - 0.25 * self.rng.random())

    def done(self, req: SimRequest, outcome: Outcome, now: float) -> None:
        if outcome not in RETRYABLE or req.client_attempt >= self.policy.max_retries:
            return
        at = now + self.delay(req.client_attempt)
        retry = SimRequest(self.next_id(), req.model, req.pool, req.strategy, req.draw, at, req.client_attempt + 1,
                           at)
        heapq.heappush(self._retries, (at, retry.id, retry))
        self.retried += 1

    def due(self, until: float) -> list[SimRequest]:
        out = []
        while self._retries and self._retries[0][0] < until:
            out.append(heapq.heappop(self._retries)[2])
        return out

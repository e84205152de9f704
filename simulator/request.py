"""One simulated request as it travels: client -> gateway -> engine -> back."""

from __future__ import annotations

from infersight.simulator.workload import Draw


class SimRequest:
    __slots__ = ("id", "model", "pool", "strategy", "draw", "arrival", "client_attempt", "gateway_attempt",
                 "instance", "engine_arrival", "admitted", "first_token", "cached", "s_start", "s_end", "done_at",
                 "preempted", "extra_latency", "fail_at", "step_s", "queued_at", "routed_at", "deadline",
                 "attempt_at", "failed_attempts", "ready_at", "prefill_done", "generated", "resumes")

    def __init__(self, rid: int, model: str, pool: str, strategy: str, draw: Draw, arrival: float,
                 client_attempt: int, deadline: float):
        self.id = rid
        self.model, self.pool, self.strategy = model, pool, strategy
        self.draw = draw
        self.arrival = arrival
        self.client_attempt = client_attempt  # 0 first try, n: the client's n-th retry (x-stainless-retry-count)
        self.gateway_attempt = 0
        self.instance = ""
        self.engine_arrival = 0.0
        self.admitted: float | None = None
        self.first_token: float | None = None
        self.cached = 0
        self.s_start = 0.0
        self.s_end = 0.0
        self.done_at: float | None = None
        self.preempted = False
        self.extra_latency = 0.0  # network latency added on the way back (a jittery host)
        self.fail_at: float | None = None  # the attempt breaks at this time (connection reset)
        self.step_s = 0.0  # decode step time seen at the end: the inter-token gap
        self.queued_at: float | None = None
        self.routed_at: float | None = None
        self.deadline = deadline  # the client gives up here
        self.attempt_at: float | None = None  # when the gateway's current attempt started (None: never routed)
        # The gateway's attempts that broke, (instance, started, ended, UpstreamError), for the trace replay
        self.failed_attempts: list[tuple[str, float, float, str]] | None = None
        self.ready_at = 0.0  # the engine can start it no earlier (disaggregated: when its KV cache has arrived)
        self.prefill_done: float | None = None  # when its (latest) prefill ends: the first token, or a resumption
        self.generated = 0.0  # tokens after the first it had made when it was last preempted
        # None when never preempted, else (token index, stream start from that token on): (0, the first
        # start), then per preemption the first token made after it and its new start (NaN until it
        # resumes). The tokens before stay: preemption pauses a request, never restarts it.
        self.resumes: list[tuple[int, float]] | None = None

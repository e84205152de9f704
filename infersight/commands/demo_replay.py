"""The simulated fleet's requests through the real RequestTracer, each on its own simulated clock.

The fleet runs 60 simulated seconds per real second, so a request's life (seconds of queue,
prefill and decode) is over in a blink of real time. Each request is therefore replayed through
the tracer when it ends, with a :class:`TracerClock` set to its simulated moments: its spans,
sampling decision and kept token timeline carry the simulated durations (a 9 s TTFT is 9 s in
ClickHouse). Span timestamps are the incident's own clock: simulated second ``t`` is stamped
``base + t``, with ``base`` chosen so that the whole scenario lies in the past when the demo
starts; neighbours and stalls then line up in time exactly as they happened in the simulation.

The gateway series Prometheus scrapes are the simulator's own aggregation of the same requests
(:mod:`infersight.simulator.gateway_metrics`, proven equal to the tracer's by
``tests/simulator/test_producer_conformance.py``): a replay at the end cannot show a request in flight.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from infersight.attributes import Outcome
from infersight.instrumentation import RequestTracer, TracerClock
from infersight.instrumentation.client_retries import RETRY_COUNT_HEADER

_DONE = object()


class SimClock:
    """A settable clock: ``perf_ns`` is the simulated time, ``wall_ns`` that time on the incident's clock."""

    def __init__(self, base_s: float) -> None:
        self.base_ns = round(base_s * 1e9)
        self.t_ns = 0

    def at(self, t_s: float) -> None:
        self.t_ns = round(t_s * 1e9)

    def tracer_clock(self) -> TracerClock:
        return TracerClock(perf_ns=lambda: self.t_ns, wall_ns=lambda: self.base_ns + self.t_ns)


class Replay:
    """Takes ended requests from the fleet (``fleet.metrics.on_end``) and traces them in a thread."""

    def __init__(self, tracer_factory, base_s: float) -> None:
        self.clock = SimClock(base_s)
        self.tracer: RequestTracer = tracer_factory(self.clock.tracer_clock())
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.replayed = 0
        self.errors = 0
        self.thread = threading.Thread(target=self._run, name="demo-replay", daemon=True)
        self.thread.start()

    def ended(self, req, outcome: str, now: float, kw: dict[str, Any]) -> None:
        """``GatewayMetrics.on_end``: copy what the replay needs (the request object lives on)."""
        self.queue.put((req.model, req.pool, req.strategy, req.instance, req.client_attempt, req.arrival,
                        req.queued_at, req.routed_at, req.draw.prompt_tokens, req.cached, outcome, now, kw))

    def close(self, timeout_s: float = 60.0) -> None:
        """Replay what is queued, then stop."""
        self.queue.put(_DONE)
        self.thread.join(timeout_s)

    def _run(self) -> None:
        while (item := self.queue.get()) is not _DONE:
            try:
                self._one(*item)
                self.replayed += 1
            except Exception:  # noqa: BLE001 - one odd request must not end the demo's tracing
                self.errors += 1

    def _one(self, model, pool, strategy, instance, client_attempt, arrival, queued_at, routed_at, prompt_tokens,
             cached, outcome, end, kw) -> None:
        clock = self.clock
        clock.at(arrival)
        headers = {RETRY_COUNT_HEADER: str(client_attempt)} if client_attempt else None
        req = self.tracer.start(model, pool=pool, strategy=strategy, headers=headers, stream=True)
        if queued_at is not None:
            req.queued()
        if instance and (routed_at is not None or outcome != Outcome.REJECTED):
            clock.at(routed_at if routed_at is not None else arrival)
            req.routed(instance)
        ttft_s, tokens = kw.get("ttft_s"), int(kw.get("tokens") or 0)
        if ttft_s is not None and tokens:
            first = arrival + ttft_s
            gap = (end - first) / (tokens - 1) if tokens > 1 else 0.0
            record = req.token_sink()
            first_ns, gap_ns, end_ns = round(first * 1e9), gap * 1e9, round(end * 1e9)
            for i in range(tokens):
                record(min(end_ns, first_ns + round(i * gap_ns)))  # rounding must not pass the end
        clock.at(end)
        if outcome == Outcome.SUCCESS:
            req.finish("stop", input_tokens=prompt_tokens, output_tokens=tokens, cached_input_tokens=cached)
        elif outcome == Outcome.REJECTED:
            req.reject(kw.get("rejection_reason") or "overloaded")
        elif outcome == Outcome.TIMEOUT:
            req.timeout(kw.get("timeout_kind") or "total", output_tokens=tokens or None)
        else:
            req.fail("upstream_error")

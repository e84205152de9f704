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
from infersight.simulator.decode_log import DecodeLog

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
    """Takes ended requests from the fleet (``fleet.metrics.on_end``) and traces them in a thread.

    With a :class:`DecodeLog`, a request's token times are its engine's decode steps (its stalls
    included); the log covers a tick only once the tick is over, so requests wait in ``pending``
    until :meth:`flush` (called after each tick is logged). Without one, tokens are spaced evenly.
    """

    def __init__(self, tracer_factory, base_s: float, log: DecodeLog | None = None,
                 gate: threading.Event | None = None) -> None:
        self.clock = SimClock(base_s)
        # Replay only while ``gate`` is set (the real-time driver's ``idle``: the fleet waits for the
        # wall clock), so that tracing never makes the fleet late; None: replay at once.
        self.gate = gate
        self.tracer: RequestTracer = tracer_factory(self.clock.tracer_clock())
        self.log = log
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.pending: list[tuple] = []
        self.replayed = 0
        self.errors = 0
        self.trace_ids: dict[int, str] = {}  # simulated request id -> its trace id (to name a stall's neighbour)
        self.thread = threading.Thread(target=self._run, name="demo-replay", daemon=True)
        self.thread.start()

    def ended(self, req, outcome: str, now: float, kw: dict[str, Any]) -> None:
        """``GatewayMetrics.on_end``: copy what the replay needs (the request object lives on)."""
        item = (req.model, req.pool, req.strategy, req.instance, req.client_attempt, req.arrival, req.queued_at,
                req.attempt_at, tuple(req.failed_attempts or ()), req.draw.prompt_tokens, req.cached,
                (req.first_token, req.s_start, req.extra_latency, tuple(req.resumes or ())), outcome, now, kw,
                req.id, req.admitted)
        if self.log is None:
            self.queue.put(item)
        else:
            self.pending.append(item)

    def flush(self) -> None:
        """Hand the requests that ended so far to the replay thread (the log now covers them)."""
        pending, self.pending = self.pending, []
        for item in pending:
            self.queue.put(item)

    def close(self, timeout_s: float = 60.0) -> None:
        """Replay what is queued, then stop."""
        self.flush()
        self.gate = None
        self.queue.put(_DONE)
        self.thread.join(timeout_s)

    def _run(self) -> None:
        while (item := self.queue.get()) is not _DONE:
            gate = self.gate
            while gate is not None and not gate.wait(0.5):
                gate = self.gate
            try:
                self._one(*item)
                self.replayed += 1
            except Exception:  # noqa: BLE001 - one odd request must not end the demo's tracing
                self.errors += 1

    def _one(self, model, pool, strategy, instance, client_attempt, arrival, queued_at, attempt_at, failed,
             prompt_tokens, cached, engine_side, outcome, end, kw, rid, admitted) -> None:
        clock = self.clock
        clock.at(arrival)
        headers = {RETRY_COUNT_HEADER: str(client_attempt)} if client_attempt else None
        req = self.tracer.start(model, pool=pool, strategy=strategy, headers=headers, stream=True)
        self.trace_ids[rid] = req.trace_id
        if queued_at is not None:
            req.queued()
        # The gateway's attempts as its instrumentation records them: each broken one routed, then
        # ended by retry() with its error (an ``upstream`` span with llm.retry.attempt and error.type);
        # the gateway re-attempts at once (no backoff). A request that failed ends on its last attempt.
        final_error = None
        if outcome == Outcome.ERROR and failed:
            *failed, (_instance, _started, _ended, final_error) = failed
        for broken_at, started, ended, error in failed:
            clock.at(started)
            req.routed(broken_at)
            clock.at(ended)
            req.retry(backoff_s=0.0, error_type=error)
        if instance and attempt_at is not None:
            clock.at(attempt_at)
            req.routed(instance)
            if admitted is not None and admitted >= attempt_at:
                # The engine scheduled it (its queue ends, its prefill starts): the span gets engine.queue,
                # engine.prefill and engine.decode, so a neighbour is labelled in the phase it was in.
                clock.at(admitted)
                req.scheduled(cached_input_tokens=cached)
        ttft_s, tokens = kw.get("ttft_s"), int(kw.get("tokens") or 0)
        if ttft_s is not None and tokens:
            clock.at(arrival + ttft_s)
            req.first_token()  # noted apart: a stream longer than the buffer keeps only its last times
            record = req.token_sink()
            end_ns = round(end * 1e9)
            for t_ns in self._token_times(instance, arrival + ttft_s, end, tokens, engine_side):
                if t_ns > end_ns + 1000:  # a timed-out stream: the tokens after the gateway gave up never came
                    break
                record(min(end_ns, t_ns))  # rounding must not pass the end
        clock.at(end)
        if outcome == Outcome.SUCCESS:
            req.finish("stop", input_tokens=prompt_tokens, output_tokens=tokens, cached_input_tokens=cached)
        elif outcome == Outcome.REJECTED:
            req.reject(kw.get("rejection_reason") or "overloaded")
        elif outcome == Outcome.TIMEOUT:
            req.timeout(kw.get("timeout_kind") or "total", output_tokens=tokens or None)
        else:
            req.fail(final_error or "upstream_error")

    def _token_times(self, instance: str, first: float, end: float, tokens: int, engine_side) -> list[int]:
        """The request's token times in ns, as the gateway saw them (the engine's, plus the network's delay)."""
        engine_first, s_start, delay, resumes = engine_side
        times = None
        if self.log is not None and engine_first is not None:
            times = self.log.token_times(instance, engine_first, s_start, tokens, end - delay, resumes)
        if times is None:
            gap = (end - first) / (tokens - 1) if tokens > 1 else 0.0
            return [round((first + i * gap) * 1e9) for i in range(tokens)]
        return [round((t + delay) * 1e9) for t in times]

"""Demo traffic: a small, named stand-in for the simulator (DESIGN 8).

Four engine instances behind a least-connection gateway, in a stable and a canary pool, serve
requests through the real :class:`RequestTracer`, in real time, a few seconds long. Halfway through,
a 32k-token prompt lands on one instance; while it prefills, every stream on that instance stalls.
Some requests to the canary are rejected with a 503 and retried elsewhere. Token gaps are
sleeps scaled down so the whole run takes seconds; the shape, not the absolute numbers, is the point.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from infersight.instrumentation import Candidate, RequestTracer

MODEL = "gemma-27b-int4"
INSTANCES = {"i-1": "stable", "i-2": "stable", "i-3": "stable", "i-4": "canary"}
STALLED_INSTANCE = "i-3"
PREFILL_TOKENS_PER_S = 55_000  # the capacity model's 11k tokens/s, x5 so the demo runs in seconds
TOKEN_GAP_S = 0.004
DECODE_MARGIN = 5  # tokens


@dataclass
class Fleet:
    """Shared state of the simulated instances: in-flight and decoding counts, a stall window each."""

    in_flight: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INSTANCES, 0))
    # Requests with at least DECODE_MARGIN tokens still to stream: a stall starting now hits them.
    decoding: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INSTANCES, 0))
    stall_until: dict[str, float] = field(default_factory=lambda: dict.fromkeys(INSTANCES, 0.0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self, exclude: str | None = None) -> tuple[str, list[Candidate]]:
        with self.lock:
            loads = {i: n for i, n in self.in_flight.items() if i != exclude}
            choice = min(loads, key=lambda i: (loads[i], i))
            self.in_flight[choice] += 1
        candidates = [Candidate(i, score=float(n), estimated_finish_ms=50.0 * (n + 1)) for i, n in loads.items()]
        return choice, candidates

    def release(self, instance: str) -> None:
        with self.lock:
            self.in_flight[instance] -= 1

    def count_decoding(self, instance: str, delta: int) -> None:
        with self.lock:
            self.decoding[instance] += delta

    def stall_when_decoding(self, instance: str, seconds: float, timeout_s: float = 5.0) -> None:
        """Start a stall on ``instance`` as soon as some request there is mid-stream.

        Waiting for that makes the demo's incident certain: the stall always catches a stream.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.decoding[instance]:
                    self.stall_until[instance] = time.monotonic() + seconds
                    return
            time.sleep(0.0005)
        self.stall_until[instance] = time.monotonic() + seconds

    def wait_if_stalled(self, instance: str) -> None:
        delay = self.stall_until[instance] - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def _serve_one(tracer: RequestTracer, fleet: Fleet, rng: random.Random, long_prompt: bool) -> None:
    input_tokens = 32_000 if long_prompt else rng.randint(200, 2_000)
    output_tokens = 8 if long_prompt else rng.randint(20, 40)
    with tracer.start(MODEL, strategy="least_conn") as req:
        req.queued()
        time.sleep(rng.uniform(0.0005, 0.003))
        instance, candidates = (STALLED_INSTANCE, []) if long_prompt else fleet.pick()
        if long_prompt:
            with fleet.lock:
                fleet.in_flight[instance] += 1
        req.routed(instance, pool=INSTANCES[instance], candidates=candidates)
        if INSTANCES[instance] == "canary" and rng.random() < 0.15:
            time.sleep(0.002)  # the canary answers 503 (overloaded); back off and go elsewhere
            fleet.release(instance)
            req.retry(backoff_s=0.02, error_type="http_503")
            time.sleep(0.02)
            instance, candidates = fleet.pick(exclude=instance)
            req.routed(instance, pool=INSTANCES[instance], candidates=candidates)
        try:
            prefill_s = input_tokens / PREFILL_TOKENS_PER_S
            if long_prompt:  # everything else on this instance waits behind this prefill
                fleet.stall_when_decoding(instance, prefill_s)
            else:
                fleet.wait_if_stalled(instance)
            time.sleep(prefill_s)
            _decode(req, fleet, instance, output_tokens, rng, stalls=not long_prompt)
            cached = 0 if long_prompt else int(input_tokens * rng.uniform(0.0, 0.8))
            req.finish("stop", input_tokens=input_tokens, output_tokens=output_tokens, cached_input_tokens=cached)
        finally:
            fleet.release(instance)


def _decode(req, fleet: Fleet, instance: str, output_tokens: int, rng: random.Random, stalls: bool) -> None:
    """Stream the tokens; a stall on the instance holds every stream there."""
    counted = stalls and output_tokens > DECODE_MARGIN
    if counted:
        fleet.count_decoding(instance, +1)
    try:
        for index in range(output_tokens):
            if counted and index == output_tokens - DECODE_MARGIN:
                fleet.count_decoding(instance, -1)
                counted = False
            if stalls:
                fleet.wait_if_stalled(instance)
            req.token()
            time.sleep(TOKEN_GAP_S * rng.uniform(0.7, 1.3))
    finally:
        if counted:
            fleet.count_decoding(instance, -1)


def run_traffic(tracer: RequestTracer, requests: int = 160, workers: int = 8, seed: int = 7,
                on_progress: Callable[[int], None] | None = None) -> None:
    """Serve ``requests`` requests with ``workers`` concurrent clients; the long prompt arrives halfway."""
    rng_lock = threading.Lock()
    rng = random.Random(seed)
    fleet = Fleet()
    done = 0

    def one(index: int) -> None:
        nonlocal done
        with rng_lock:
            local = random.Random(rng.random())
        _serve_one(tracer, fleet, local, long_prompt=index == requests // 2)
        with rng_lock:
            done += 1
            if on_progress:
                on_progress(done)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="demo-client") as pool:
        list(pool.map(one, range(requests)))

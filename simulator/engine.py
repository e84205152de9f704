"""A simulated engine instance: continuous batching over the capacity model's arithmetic.

Per tick: waiting requests are admitted while the KV cache has room (prefix-cache hits skip
their cached tokens); prefill runs one request after another at the compute-bound rate; every
running request advances by one token per decode step, and a step takes longer as the batch's KV
grows. Prefill is chunked as vLLM chunks it: a step holds at most ``max_batched_tokens`` (one per
decode, the rest for a prompt), so while a prompt is in prefill each step carries one chunk of it
and lasts as long as that chunk's compute: the running requests get one token per chunk, a long
prompt's prefill is a stall every decoding request on the instance feels. When the KV cache
overflows, the most recently admitted request is preempted (vLLM's recompute mode: its KV freed,
``num_computed_tokens = 0``, back to the front of the queue); it keeps the tokens it has made and,
when scheduled again, recomputes its prompt and those tokens before it carries on: a pause in its
stream, not a restart. Counters and histograms are kept under vLLM's names (see
:mod:`.vllm_format`), reset when the process restarts, as a real engine's are.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence

from infersight.signals import engine as engine_signals
from infersight.simulator.histogram import CountingHistogram
from infersight.simulator.physics import BANDWIDTH_EFFICIENCY, STEP_OVERHEAD_S, Physics
from infersight.simulator.request import SimRequest

KV_WATERMARK = 0.98  # admit only while the KV cache stays under this share (vLLM keeps a little free)
MAX_NUM_SEQS = 256  # vLLM's default batch limit
BLOCK_SIZE = 16
FINISH_REASONS = ("stop", "length", "abort", "error")


# The engine's histograms and their default bounds (vLLM's); an engine format with buckets of its own
# (SGLang) passes its bounds under these keys.
DEFAULT_BOUNDS = {"ttft": engine_signals.TTFT.buckets, "itl": engine_signals.INTER_TOKEN.buckets,
                  "e2e": engine_signals.E2E.buckets, "queue": engine_signals.QUEUE_TIME.buckets,
                  "prefill": engine_signals.PREFILL_TIME.buckets, "decode": engine_signals.DECODE_TIME.buckets}


class EngineStats:
    """What the engine's /metrics counts; a fresh one on every process start."""

    def __init__(self, bounds: Mapping[str, Sequence[float]] | None = None) -> None:
        b = {**DEFAULT_BOUNDS, **(bounds or {})}
        self.prompt_tokens = 0
        self.generation_tokens = 0.0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preemptions = 0
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        # Counted when a request finishes (SGLang's tokenizer counts its tokens then, not per step).
        self.done_prompt_tokens = 0
        self.done_generation_tokens = 0
        self.done_cached_tokens = 0
        self.ttft = CountingHistogram(b["ttft"])
        self.itl = CountingHistogram(b["itl"])
        self.e2e = CountingHistogram(b["e2e"])
        self.queue = CountingHistogram(b["queue"])
        self.prefill = CountingHistogram(b["prefill"])
        self.decode = CountingHistogram(b["decode"])


class SimEngine:
    role = ""  # its part in prefill/decode disaggregation ("": both, as every engine that is not disaggregated)
    prefill_only = False  # a disaggregated prefill instance: a request ends with its first token

    def __init__(self, instance: str, model: str, pool: str, node: str, gpu: int, physics: Physics,
                 cold_factor: float = 3.0, warmup_s: float = 180.0, kind: str = "vllm",
                 bounds: Mapping[str, Sequence[float]] | None = None):
        self.instance, self.model, self.pool, self.node, self.gpu = instance, model, pool, node, gpu
        self.physics = physics
        self.kind = kind  # the engine it stands for: the /metrics format it serves (see simulator/formats.py)
        self.bounds = bounds  # its histograms' bounds (None: vLLM's)
        self.cold_factor = cold_factor  # steps this much slower right after start (graphs, compile caches)
        self.warmup_s = warmup_s
        self.slowdown = 1.0  # a regression in the build: every step this much slower
        self.prefill_slowdown = 1.0
        self.network_jitter = 0.0  # share of attempts to this host that break
        self.network_delay_s = 0.0
        self.up = False
        self.draining = False  # a deploy drains it: the gateway sends it nothing new
        self.down_until = 0.0
        self.started_at = 0.0
        self.compute_share = 0.0
        self.bandwidth_share = 0.0
        # The real-time demo's decode log sets a list here: each tick then appends its steps as (time,
        # stream position, None or, for steps that carried a prefill chunk, (request id, prefill tokens,
        # step seconds, when and at which stream position its chunk steps began)), see decode_log.py.
        self.step_log: list[tuple[float, float, tuple[int, int, float, float, float] | None]] | None = None
        self._reset_state()

    # -- lifecycle ---------------------------------------------------------------------------------
    def _reset_state(self) -> None:
        self.stats = EngineStats(self.bounds)
        self.waiting: deque[SimRequest] = deque()
        self.waiting_tokens = 0
        self.prefilling: list[SimRequest] = []
        self.decoding: dict[int, SimRequest] = {}
        self.order: list[SimRequest] = []  # admission order, for preemption
        self.heap: list[tuple[float, int, SimRequest]] = []
        self.S = 0.0  # tokens each decoding stream has produced so far (shared rate)
        self.kv_prompt = 0
        self.kv_s0 = 0.0
        self.cache: OrderedDict[str, int] = OrderedDict()
        self.cache_tokens = 0
        self.prefill_free_at = 0.0
        # Prefills scheduled, in time order: (start, end, seconds per chunk step, request id, tokens)
        self.chunks: list[tuple[float, float, float, int, int]] = []
        self._chunk_origin: dict[int, tuple[float, float]] = {}  # for the step log: where each one's steps began

    def start(self, now: float, cold: bool = True) -> None:
        self._reset_state()
        self.up = True
        self.started_at = now if cold else now - self.warmup_s

    def crash(self, now: float, down_s: float) -> list[SimRequest]:
        """The process dies (restart, GPU lost): every request on it breaks; back after ``down_s``."""
        lost = [*self.waiting, *self.prefilling, *self.decoding.values()]
        self.up = False
        self.down_until = now + down_s if math.isfinite(down_s) else math.inf
        self._reset_state()
        return lost

    # -- state -------------------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def kv_used(self) -> float:
        return self.kv_prompt + len(self.decoding) * self.S - self.kv_s0

    def kv_usage(self) -> float:
        return min(1.0, self.kv_used() / self.physics.kv_capacity_tokens)

    def warm_factor(self, now: float) -> float:
        left = max(0.0, 1.0 - (now - self.started_at) / self.warmup_s) if self.warmup_s > 0 else 0.0
        return 1.0 + (self.cold_factor - 1.0) * left

    def holds(self, prefix: str) -> bool:
        return prefix in self.cache

    def probe_seconds(self, now: float) -> float:
        """How long a tiny request sent now would wait for its first token (a health probe's view)."""
        backlog = max(0.0, self.prefill_free_at - now)
        backlog += self.waiting_tokens / (self.physics.prefill_tokens_per_s / self.prefill_slowdown)
        return backlog * self.warm_factor(now) + self.step_s(now)

    def step_s(self, now: float) -> float:
        kv = self.kv_used()
        return self.physics.step_seconds(kv) * self.slowdown * self.warm_factor(now) + STEP_OVERHEAD_S

    # -- requests ----------------------------------------------------------------------------------
    def submit(self, req: SimRequest, now: float) -> None:
        req.engine_arrival = now
        req.instance = self.instance
        self.waiting.append(req)
        self.waiting_tokens += req.draw.prompt_tokens

    def abort(self, req: SimRequest) -> None:
        """The client went away: free the request wherever it is (vLLM counts it as abort)."""
        if req in self.waiting:
            self.waiting.remove(req)
            self.waiting_tokens -= req.draw.prompt_tokens
        elif req.id in self.decoding:
            self._release(req)
            req.preempted = True  # lazily dropped from the heap
        elif req in self.prefilling:
            self.prefilling.remove(req)
            self.kv_prompt -= req.draw.prompt_tokens
            self.chunks = [c for c in self.chunks if c[3] != req.id]  # its prefill chunks no longer run
        else:
            return
        self.stats.finished["abort"] += 1

    def _release(self, req: SimRequest) -> None:
        del self.decoding[req.id]
        self.kv_prompt -= req.draw.prompt_tokens
        self.kv_s0 -= req.s_start

    def _lookup_cache(self, req: SimRequest) -> int:
        d = req.draw
        self.stats.prefix_queries += d.prompt_tokens
        cached = 0
        if d.prefix_tokens and d.prefix in self.cache:
            self.cache.move_to_end(d.prefix)
            cached = (d.prefix_tokens // BLOCK_SIZE) * BLOCK_SIZE
        elif d.prefix_tokens:
            self.cache[d.prefix] = d.prefix_tokens
            self.cache_tokens += d.prefix_tokens
            room = max(0.1 * self.physics.kv_capacity_tokens, self.physics.kv_capacity_tokens - self.kv_used())
            while self.cache_tokens > room and len(self.cache) > 1:
                _, tokens = self.cache.popitem(last=False)
                self.cache_tokens -= tokens
        self.stats.prefix_hits += cached
        return cached

    def advance(self, t0: float, t1: float) -> list[SimRequest]:
        """Run the engine from ``t0`` to ``t1``; return the requests that finished."""
        if not self.up:
            self.compute_share = self.bandwidth_share = 0.0
            return []
        dt = t1 - t0
        phys, stats = self.physics, self.stats
        capacity = phys.kv_capacity_tokens * KV_WATERMARK
        warm = self.warm_factor(t0)
        rate = phys.prefill_tokens_per_s / (self.prefill_slowdown * warm)
        cursor = max(self.prefill_free_at, t0)
        prefill_busy = 0.0
        prefill_tokens = 0
        budget = max(1, phys.max_batched_tokens - len(self.decoding))  # what a step leaves a prefill
        while self.waiting and self.running < MAX_NUM_SEQS and cursor < t1:
            req = self.waiting[0]
            resumed = req.resumes is not None and req.first_token is not None
            made = math.ceil(req.generated) if resumed else 0  # a preempted request recomputes its tokens too
            if self.kv_used() + req.draw.prompt_tokens + made > capacity and self.running:
                break
            self.waiting.popleft()
            self.waiting_tokens -= req.draw.prompt_tokens
            start = max(cursor, req.engine_arrival, req.ready_at)
            if resumed:  # the prefix cache may still hold its prompt's prefix (not counted again as a query)
                todo = req.draw.prompt_tokens + made - (req.cached if req.draw.prefix in self.cache else 0)
            else:
                req.cached = self._lookup_cache(req)
                todo = req.draw.prompt_tokens - req.cached
            duration = todo / rate
            cursor = start + duration
            self.chunks.append((start, cursor, duration / math.ceil(max(1, todo) / budget), req.id, todo))
            prefill_busy += min(cursor, t1) - max(start, t0)
            prefill_tokens += todo
            if not resumed:
                stats.prompt_tokens += req.draw.prompt_tokens
                req.admitted = start
                req.first_token = cursor
            req.prefill_done = cursor
            self.kv_prompt += req.draw.prompt_tokens
            self.prefilling.append(req)
            self.order.append(req)
        self.prefill_free_at = cursor

        # Requests whose prefill ended join the decoding batch at the shared stream position.
        still: list[SimRequest] = []
        prefilled: list[SimRequest] = []
        for req in self.prefilling:
            if req.prefill_done <= t1 and self.prefill_only:
                prefilled.append(req)
            elif req.prefill_done <= t1:
                if req.resumes:  # back from a preemption: it carries on from the tokens it had made
                    req.s_start = self.S - req.generated
                    req.resumes[-1] = (req.resumes[-1][0], req.s_start)
                else:
                    req.s_start = self.S
                    stats.ttft.observe(req.first_token - req.engine_arrival)
                    stats.queue.observe(req.admitted - req.engine_arrival)
                    stats.prefill.observe(req.first_token - req.admitted)
                req.s_end = req.s_start + max(0, req.draw.output_tokens - 1)
                self.decoding[req.id] = req
                self.kv_s0 += req.s_start
                heapq.heappush(self.heap, (req.s_end, req.id, req))
            else:
                still.append(req)
        self.prefilling = still
        for req in prefilled:  # its first token ends it (max_tokens 1): no decode step, its KV cache freed
            self.kv_prompt -= req.draw.prompt_tokens
            req.done_at = req.first_token
            stats.ttft.observe(req.first_token - req.engine_arrival)
            stats.queue.observe(req.admitted - req.engine_arrival)
            stats.prefill.observe(req.first_token - req.admitted)
            stats.e2e.observe(req.done_at - req.engine_arrival)
            stats.finished["length"] += 1
            stats.generation_tokens += 1
        if prefilled and len(self.order) > 4 * len(self.prefilling) + 64:
            self.order = [r for r in self.order if r in self.prefilling]

        n = len(self.decoding)
        step = self.step_s(t0)
        steps = 0.0
        if n:
            s0 = self.S
            steps = self._decode_steps(t0, t1, step, n)
            stats.generation_tokens += n * steps
            finished = self._pop_finished(t0, dt, s0, step)
            self._preempt_overflow()  # after the finished ones freed their KV: they need no room
        else:
            self.chunks = [c for c in self.chunks if c[1] > t1]
            finished = []
        gpu_step = step - STEP_OVERHEAD_S
        self.bandwidth_share = min(1.0, BANDWIDTH_EFFICIENCY * steps * gpu_step / dt + 0.3 * prefill_busy / dt)
        flops = phys.decode_flops(n * steps + prefill_tokens)
        self.compute_share = min(1.0, flops / (phys.gpu.flops * dt))
        return finished + prefilled if prefilled else finished

    def _decode_steps(self, t0: float, t1: float, step: float, n: int) -> float:
        """Advance the stream from ``t0`` to ``t1``; returns the decode steps made.

        A step every ``step`` seconds, except while a prefill is scheduled: then each step also
        carries one chunk of the prompt and lasts as long as the chunk's compute (never less than a
        plain step), so the ``n`` decoding requests get one token per chunk. Each step is counted in
        the inter-token histogram with its own length, as vLLM counts it.
        """
        log, itl = self.step_log, self.stats.itl
        s0, steps, plain, cursor = self.S, 0.0, 0.0, t0
        keep = []
        for chunk in self.chunks:
            start, end, chunk_s, rid, tokens = chunk
            if end > t1:
                keep.append(chunk)
            a, b = max(start, cursor), min(end, t1)
            if b <= a:
                continue
            if a > cursor:
                plain += (a - cursor) / step
                steps += (a - cursor) / step
                if log is not None:
                    log.append((a, s0 + steps, None))
            per = max(chunk_s, step)
            if log is not None:
                origin = self._chunk_origin.setdefault(rid, (a, s0 + steps))  # where its steps began
            k = (b - a) / per
            steps += k
            itl.observe(per, int(round(n * k)))
            if log is not None:
                log.append((b, s0 + steps, (rid, tokens, per, *origin)))
            cursor = b
        if cursor < t1:
            plain += (t1 - cursor) / step
            steps += (t1 - cursor) / step
            if log is not None:
                log.append((t1, s0 + steps, None))
        itl.observe(step, int(round(n * plain)))
        if log is not None and len(self._chunk_origin) > len(keep):
            going = {c[3] for c in keep}
            self._chunk_origin = {rid: o for rid, o in self._chunk_origin.items() if rid in going}
        self.chunks = keep
        self.S = s0 + steps
        return steps

    def _preempt_overflow(self) -> None:
        capacity = self.physics.kv_capacity_tokens
        while self.kv_used() > capacity and len(self.decoding) > 1:
            victim = self.order.pop()
            if victim.id not in self.decoding:
                continue
            made = min(self.S - victim.s_start, max(0, victim.draw.output_tokens - 1))
            self._release(victim)
            self.stats.preemptions += 1
            # vLLM's recompute: KV freed, back to the head of the queue; the tokens it streamed stay, and
            # when it is scheduled again it recomputes them with its prompt and carries on after them
            victim.generated = made
            # (0, its first stream start) first: its tokens before the pause keep their times
            victim.resumes = [*(victim.resumes or [(0, victim.s_start)]), (math.floor(made) + 1, math.nan)]
            self.waiting.appendleft(victim)
            self.waiting_tokens += victim.draw.prompt_tokens
            self.heap = [entry for entry in self.heap if entry[2] is not victim]
            heapq.heapify(self.heap)

    def _pop_finished(self, t0: float, dt: float, s0: float, step: float) -> list[SimRequest]:
        done: list[SimRequest] = []
        span = self.S - s0
        while self.heap and self.heap[0][0] <= self.S:
            _, _, req = heapq.heappop(self.heap)
            if req.preempted or req.id not in self.decoding:
                continue
            self._release(req)
            at = t0 + (req.s_end - s0) / span * dt if span > 0 else t0
            req.done_at = max(at, req.first_token)
            req.step_s = step
            reason = "length" if req.draw.output_tokens >= 4096 else "stop"
            self.stats.finished[reason] += 1
            self.stats.done_prompt_tokens += req.draw.prompt_tokens
            self.stats.done_generation_tokens += req.draw.output_tokens
            self.stats.done_cached_tokens += req.cached
            self.stats.e2e.observe(req.done_at - req.engine_arrival)
            self.stats.decode.observe(req.done_at - req.first_token)
            done.append(req)
        if len(self.order) > 4 * (len(self.decoding) + len(self.prefilling)) + 64:
            self.order = [r for r in self.order if r.id in self.decoding or r in self.prefilling]
        return done

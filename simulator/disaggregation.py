"""Prefill/decode disaggregation: a prefill pool, a decode pool and the KV transfer between them.

As llm-d serves it (llm-d/llm-d-router ``docs/disagg_pd.md``: the gateway routes to a decode pod,
whose sidecar sends the prompt to a prefill pod first) with vLLM's NixlConnector
(vllm-project/vllm ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/``): the prefill instance
runs the prompt with ``max_tokens`` 1, then the decode instance reads the prompt's KV cache from it
(a NIXL READ the decode worker issues) and decodes. The read is bandwidth-bound: prompt tokens x
the capacity model's KV bytes per token, over the decode instance's link (its NIC), which the
transfers in flight share equally. While a request waits for its KV the decode vLLM holds it in
its waiting queue (``num_requests_waiting``) and by KV-load stage
(``num_requests_kv_fetch_by_stage``, vLLM's ``vllm/v1/metrics/loggers.py``, KV consumers only); each
finished read is one observation of ``nixl_xfer_time_seconds`` (NIXL's own histogram, its buckets,
``.../nixl/stats.py``), created at 0 with the engine as every vLLM family is. The decode vLLM's own
TTFT runs from the request's arrival there (after the prefill) to its first token, so it includes
the wait for the KV; the prefill instance's TTFT is its prefill alone.

Not modelled: the prefill instance keeps a request's KV blocks until the decode side has read
them (NIXL frees them on the decode's notification or after a timeout, counted in
``nixl_num_kv_expired_reqs``), so a slow link also fills the prefill pool's KV cache; here the
prefill instance frees them at once. No decode-local prefix caching of transferred prompts.
"""

from __future__ import annotations

import heapq
import itertools
import math

from prometheus_client.samples import Sample

from infersight.simulator import vllm_format
from infersight.simulator.engine import SimEngine
from infersight.simulator.histogram import CountingHistogram
from infersight.simulator.physics import Physics
from infersight.simulator.request import SimRequest
from infersight.simulator.workload import Draw

GB = 1e9
# vllm:nixl_xfer_time_seconds buckets (stats.py declares 0.001 ... 5.0 and uses all but the first)
NIXL_XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")
_shadow_ids = itertools.count(-1, -1)  # prefill-side copies of a request; never a gateway request id


class KVLink:
    """One decode instance's link for KV reads: the transfers in flight share its bandwidth equally.

    Processor sharing in virtual time: ``served`` is how many bytes each transfer in flight has
    received since the link started; a transfer of ``n`` bytes that starts when it stands at ``v``
    ends when it reaches ``v + n``, so each completion is one heap operation, however many share the link.
    """

    def __init__(self, gb_s: float):
        self.bytes_per_s = gb_s * GB
        self.clear()

    def clear(self) -> None:
        self.served = 0.0
        self.heap: list[tuple[float, int, SimRequest, float]] = []  # (served at the end, id, request, started)
        self.starting: list[tuple[float, int, SimRequest, float]] = []  # (at, id, request, bytes), this tick
        self.gone: set[int] = set()  # requests aborted on the link: dropped when next met
        self.n = 0  # transfers in flight

    def start(self, req: SimRequest, nbytes: float, at: float) -> None:
        self.starting.append((at, req.id, req, nbytes))

    def drop(self, req: SimRequest) -> None:
        """The request went away: its transfer stops taking a share of the link."""
        if any(entry[2] is req for entry in self.starting):
            self.starting = [entry for entry in self.starting if entry[2] is not req]
        elif any(entry[2] is req for entry in self.heap):
            self.gone.add(req.id)
            self.n -= 1

    def __len__(self) -> int:
        return self.n + len(self.starting)

    def advance(self, t0: float, t1: float) -> list[tuple[SimRequest, float, float]]:
        """(request, started, done) for every transfer that completes in ``[t0, t1]``."""
        self.starting.sort(key=lambda s: (s[0], s[1]))
        done: list[tuple[SimRequest, float, float]] = []
        t = t0
        while True:
            while self.heap and self.heap[0][1] in self.gone:
                self.gone.discard(heapq.heappop(self.heap)[1])
            rate = self.bytes_per_s / self.n if self.n else 0.0
            next_start = max(self.starting[0][0], t) if self.starting else math.inf
            next_done = t + (self.heap[0][0] - self.served) / rate if self.n else math.inf
            t_next = min(next_start, next_done, t1)
            self.served += rate * (t_next - t)
            t = t_next
            if self.n and t >= next_done:
                end, _rid, req, started = heapq.heappop(self.heap)
                self.served = max(self.served, end)
                self.n -= 1
                done.append((req, started, t))
                continue
            if self.starting and self.starting[0][0] <= t:
                at, rid, req, nbytes = self.starting.pop(0)
                heapq.heappush(self.heap, (self.served + nbytes, rid, req, at))
                self.n += 1
                continue
            if t >= t1:
                return done


class DecodeEngine(SimEngine):
    """A decode instance: requests reach it from the gateway, are prefilled elsewhere, and wait
    here for their KV cache before they decode."""

    role = "decode"

    def __init__(self, *args, pd: Disaggregation, link_gb_s: float, **kw):
        self.pd = pd
        self.link = KVLink(link_gb_s)
        self.fetching: dict[int, SimRequest] = {}  # at the prefill instance or on the link
        super().__init__(*args, **kw)

    def _reset_state(self) -> None:
        super()._reset_state()
        self.xfer = CountingHistogram(NIXL_XFER_BUCKETS)
        self.fetching = {}
        self.link.clear()

    def submit(self, req: SimRequest, now: float) -> None:
        req.instance = self.instance
        req.engine_arrival = now
        req.ready_at = 0.0
        self.fetching[req.id] = req
        self.pd.prefill(req, self, now)

    def kv_arrived(self, req: SimRequest, started: float, done: float) -> None:
        """The request's KV cache is here: it joins the waiting queue with its prompt computed."""
        del self.fetching[req.id]
        self.xfer.observe(done - started)
        req.engine_arrival = started  # the sidecar hands it to the decode vLLM once the prefill is done
        req.ready_at = done
        self.waiting.append(req)
        self.waiting_tokens += 1

    def _lookup_cache(self, req: SimRequest) -> int:
        # The prompt's KV came over the link (vLLM counts it as external, not as a local prefix hit);
        # the decode instance computes the last prompt token only.
        return req.draw.prompt_tokens - 1

    def abort(self, req: SimRequest) -> None:
        if self.fetching.pop(req.id, None) is not None:
            self.link.drop(req)
            self.stats.finished["abort"] += 1
            return
        super().abort(req)

    def crash(self, now: float, down_s: float) -> list[SimRequest]:
        fetching = list(self.fetching.values())
        return super().crash(now, down_s) + fetching

    def advance(self, t0: float, t1: float) -> list[SimRequest]:
        if self.up:
            for req, started, done in self.link.advance(t0, t1):
                if req.id in self.fetching:
                    self.kv_arrived(req, started, done)
        return super().advance(t0, t1)

    def on_link(self) -> int:
        return len(self.link)


class PrefillEngine(SimEngine):
    """A prefill instance: it runs prompts with one output token and hands them to the decode side."""

    role = "prefill"
    prefill_only = True

    def __init__(self, *args, pd: Disaggregation, **kw):
        self.pd = pd
        super().__init__(*args, **kw)

    def advance(self, t0: float, t1: float) -> list[SimRequest]:
        for shadow in super().advance(t0, t1):
            self.pd.prefilled(shadow)
        return []  # nothing here answers the gateway: the decode instance does


class Disaggregation:
    """One model pool served disaggregated: its prefill instances and the decode instances they feed."""

    def __init__(self, physics: Physics) -> None:
        self.physics = physics
        self.prefill_engines: list[PrefillEngine] = []
        self.shadows: dict[int, tuple[SimRequest, DecodeEngine]] = {}

    def prefill(self, req: SimRequest, decode: DecodeEngine, now: float) -> None:
        """Send the prompt to the least-loaded prefill instance (the router's choice)."""
        up = [p for p in self.prefill_engines if p.up]
        if not up:  # nothing to prefill on: the decode instance prefills itself (llm-d's decode-only path)
            decode.fetching.pop(req.id, None)
            SimEngine.submit(decode, req, now)
            req.ready_at = 0.0
            return
        target = min(up, key=lambda p: (p.waiting_tokens + max(0.0, p.prefill_free_at - now)
                                        * p.physics.prefill_tokens_per_s, p.instance))
        d = req.draw
        shadow = SimRequest(next(_shadow_ids), req.model, req.pool, req.strategy,
                            Draw(d.prompt_tokens, 1, d.prefix, d.prefix_tokens), now, 0, req.deadline)
        self.shadows[shadow.id] = (req, decode)
        target.submit(shadow, now)

    def prefilled(self, shadow: SimRequest) -> None:
        req, decode = self.shadows.pop(shadow.id)
        if req.id in decode.fetching and decode.up:
            decode.link.start(req, req.draw.prompt_tokens * self.physics.kv_bytes_per_token, shadow.first_token)


# -- /metrics of a decode instance: vLLM's, plus what a KV consumer adds ---------------------------
def vllm_families(engine: SimEngine) -> dict[str, list[Sample]]:
    out = vllm_format.families(engine)
    if not isinstance(engine, DecodeEngine):
        return out
    labels = {"engine": vllm_format.ENGINE_RANK, "model_name": engine.model}
    on_link = engine.on_link()
    # vLLM holds a request waiting for remote KV in its waiting queue
    out["vllm:num_requests_waiting"] = [Sample("vllm:num_requests_waiting", labels,
                                               float(len(engine.waiting) + on_link))]
    stages = {"waiting_to_start": 0, "in_progress": on_link, "completed_waiting": 0}
    out["vllm:num_requests_kv_fetch_by_stage"] = [
        Sample("vllm:num_requests_kv_fetch_by_stage", {**labels, "stage": stage}, float(stages[stage]))
        for stage in KV_FETCH_STAGES]
    out["vllm:nixl_xfer_time_seconds"] = vllm_format._histogram("vllm:nixl_xfer_time_seconds", labels, engine.xfer)
    return out


FAMILIES = {
    "vllm:num_requests_kv_fetch_by_stage": (
        "gauge", "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs an "
                 "async KV load that has not started; 'in_progress' = load started and not yet reported finished; "
                 "'completed_waiting' = load finished, request not running yet."),
    "vllm:nixl_xfer_time_seconds": ("histogram", "Histogram of transfer duration for NIXL KV Cache transfers."),
}


def vllm_exposition(engine: SimEngine) -> str:
    return vllm_format.render(vllm_families(engine), {**vllm_format.FAMILIES, **FAMILIES})

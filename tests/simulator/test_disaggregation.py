"""Prefill/decode disaggregation in the simulator: the KV read is bandwidth-bound and shares the
decode instance's link, a decode instance serves what a vLLM KV consumer serves, and in
``pd-kv-link-saturation`` the time goes into the KV transfer while prefill and decode look healthy.

The scenario checks read its one recorded run (``tests/simulator/runs.py``), no second simulation.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.capacity import GPU_PRESETS
from infersight.collectors.engine.normalize import TargetLabels, normalize
from infersight.config import Config
from infersight.signals import engine as sig
from infersight.simulator import formats
from infersight.simulator.disaggregation import DecodeEngine, Disaggregation, KVLink, PrefillEngine
from infersight.simulator.physics import Physics
from infersight.simulator.request import SimRequest
from infersight.simulator.workload import Draw
from tests.simulator.runs import SCENARIOS, recorded

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
REAL_VLLM = FIXTURES / "vllm_0_32_cpu_real.txt"
PD_VLLM = FIXTURES / "vllm_0_32_pd_sleep_source.txt"  # a NIXL decode instance, written from vLLM's source
NAME = "pd-kv-link-saturation"


def _request(i: int, prompt: int, output: int = 20, at: float = 0.0) -> SimRequest:
    return SimRequest(i, "gemma-27b-int4", "stable", "least_conn", Draw(prompt, output, f"u{i}", 0), at, 0, 1e9)


def test_transfers_in_flight_share_the_link():
    link = KVLink(gb_s=1.0)
    a, b, c = (_request(i, 1) for i in range(3))
    link.start(a, 1e9, 0.0)
    link.start(b, 1e9, 0.5)
    link.start(c, 0.25e9, 1.0)
    done = [(r.id, started, round(end, 9)) for t in range(4) for r, started, end in link.advance(t, t + 1.0)]
    # a alone for 0.5 s, a and b halves until 1 s, a third each until a and c end at 1.75, then b alone
    assert done == [(0, 0.0, 1.75), (2, 1.0, 1.75), (1, 0.5, 2.25)]
    assert len(link) == 0


def _pd(link_gb_s: float = 40.0) -> tuple[Disaggregation, PrefillEngine, DecodeEngine]:
    physics = Physics.build(Config().capacity.model, GPU_PRESETS["H100-SXM"])
    pd = Disaggregation(physics)
    prefill = PrefillEngine("sim-n01:8000", "gemma-27b-int4", "stable", "sim-n01", 0, physics, pd=pd)
    decode = DecodeEngine("sim-n01:8001", "gemma-27b-int4", "stable", "sim-n01", 1, physics, pd=pd,
                          link_gb_s=link_gb_s)
    pd.prefill_engines = [prefill]
    for engine in (prefill, decode):
        engine.start(0.0, cold=False)
    return pd, prefill, decode


def _run(engines, seconds: float, step: float = 0.5) -> list[SimRequest]:
    done = []
    for i in range(int(seconds / step)):
        for engine in engines:
            done += engine.advance(i * step, (i + 1) * step)
    return done


def test_the_kv_read_is_the_prompts_kv_bytes_over_the_link():
    pd, prefill, decode = _pd(link_gb_s=2.0)
    req = _request(1, 2000)
    decode.submit(req, 0.0)
    finished = _run([prefill, decode], 10.0)
    assert finished == [req]  # the decode instance answers; the prefill instance answers nobody
    expected = 2000 * pd.physics.kv_bytes_per_token / 2e9  # capacity model: layers x kv heads x head dim x 2 x bytes
    assert decode.xfer.count == 1 and decode.xfer.sum == pytest.approx(expected)
    assert prefill.stats.prompt_tokens == 2000 and prefill.stats.generation_tokens < 2  # prefill: max_tokens 1
    assert decode.stats.prefix_queries == 0  # its prompt came over the link, not from a local prefix hit
    decode_ttft = decode.stats.ttft.sum
    assert decode_ttft >= expected  # the decode vLLM's TTFT includes the wait for the KV cache
    assert prefill.stats.ttft.sum < decode_ttft


def _shapes(text: str) -> dict[str, tuple[str, set]]:
    return {f.name: (f.type, {(s.name, tuple(sorted(k for k in s.labels if k != "le"))) for s in f.samples
                              if not s.name.endswith("_created")}) for f in text_string_to_metric_families(text)}


def test_a_decode_instance_serves_what_a_vllm_kv_consumer_serves():
    _pd_, prefill, decode = _pd(link_gb_s=0.5)
    rng = random.Random(5)
    for i in range(30):
        decode.submit(_request(i, rng.randint(500, 3000), at=i * 0.2), i * 0.2)
    _run([prefill, decode], 6.0)
    text = formats.exposition(decode)
    simulated = _shapes(text)
    real = {**_shapes(REAL_VLLM.read_text()), **_shapes(PD_VLLM.read_text())}
    assert {"vllm:num_requests_kv_fetch_by_stage", "vllm:nixl_xfer_time_seconds"} <= simulated.keys() <= real.keys()
    for family, shape in simulated.items():
        if not family.endswith("_info"):
            assert shape == real[family], family
    normalized = normalize(text, TargetLabels("sim-n01:8001", "stable", "sim-n01", "1", role="decode"), "vllm")
    queue = {s.labels["stage"]: s.value for s in normalized.samples[sig.KV_TRANSFER_QUEUE]}
    assert queue["in_progress"] > 0 and set(queue) == {"waiting_to_start", "in_progress", "completed_waiting"}
    waiting = normalized.samples[sig.REQUESTS_WAITING][0].value
    assert waiting >= queue["in_progress"]  # vLLM holds a request waiting for its KV in the waiting queue
    assert {s.labels["role"] for s in normalized.samples[sig.KV_TRANSFER_DURATION]} == {"decode"}
    assert "vllm:num_requests_kv_fetch_by_stage" not in formats.exposition(prefill)  # KV consumers only


def _series(name: str, **want: str) -> list[tuple[dict[str, str], list[float | None]]]:
    return [(dict(labels), values) for (n, labels), values in recorded(NAME).series.items()
            if n == name and want.items() <= dict(labels).items()]


def _mean_rate(name_sum: str, name_count: str, role: str, m0: int, m1: int) -> float:
    """Mean of a histogram over minutes m0..m1, every instance of ``role`` together."""
    total = count = 0.0
    for (_labels, s), (_l2, c) in zip(sorted(_series(name_sum, role=role), key=lambda x: x[0]["instance"]),
                                      sorted(_series(name_count, role=role), key=lambda x: x[0]["instance"]),
                                      strict=True):
        total += (s[m1] or 0.0) - (s[m0] or 0.0)
        count += (c[m1] or 0.0) - (c[m0] or 0.0)
    return total / count


def _share_within(bucket: str, le: str, role: str, m0: int, m1: int) -> float:
    """Share of a histogram's observations over minutes m0..m1 at or under ``le``, every instance of ``role``."""
    def delta(bound: str) -> float:
        return sum((v[m1] or 0.0) - (v[m0] or 0.0) for _labels, v in _series(bucket, role=role, le=bound))
    return delta(le) / delta("+Inf")


def test_the_time_goes_into_the_kv_transfer_while_prefill_and_decode_look_healthy():
    scenario = SCENARIOS[NAME]
    onset, end = int(scenario.onset_minute), scenario.minutes
    before, after = (5, onset), (onset + 10, end)
    duration = sig.KV_TRANSFER_DURATION.name
    transfer = [_mean_rate(duration + "_sum", duration + "_count", "decode", *w) for w in (before, after)]
    assert transfer[0] < 0.05 and transfer[1] > 0.5, transfer  # milliseconds over RDMA, then seconds
    queued = [max(v or 0.0 for v in values[after[0]:]) for labels, values in
              _series(sig.KV_TRANSFER_QUEUE.name, role="decode", stage="in_progress")]
    assert queued and min(queued) > 0
    # the prefill pool is not the problem: its own TTFT stays well inside the SLO
    assert _share_within(sig.TTFT.name + "_bucket", "0.5", "prefill", *after) > 0.95
    kv = [v for _labels, values in _series(sig.KV_CACHE_USAGE.name, role="decode") for v in values[onset:] if v]
    assert max(kv) < 0.5  # decoding is not short of memory either
    waiting = [v for _labels, values in _series(sig.REQUESTS_WAITING.name, role="prefill") for v in values[onset:]]
    assert max(v or 0.0 for v in waiting) < 5

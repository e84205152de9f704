import pytest

from infersight.capacity import GIB, GPU_PRESETS, KIB, MIB, ModelSpec, plan

MODEL_27B_INT4 = ModelSpec(name="27b", params=27e9, layers=64, kv_heads=8, head_dim=128, weight_bits=4, kv_bytes=2)


def test_kv_cache_reference_figures():
    p2k = plan(MODEL_27B_INT4, GPU_PRESETS["H100-SXM"], context_tokens=2048)
    assert p2k.kv_bytes_per_token == 256 * KIB
    assert p2k.kv_bytes_per_request == 512 * MIB
    assert plan(MODEL_27B_INT4, GPU_PRESETS["H100-SXM"], context_tokens=8192).kv_bytes_per_request == 2 * GIB


def test_decode_ceilings():
    assert plan(MODEL_27B_INT4, GPU_PRESETS["H100-SXM"]).weight_bytes == pytest.approx(13.5e9)
    assert plan(MODEL_27B_INT4, GPU_PRESETS["H100-SXM"]).decode_tokens_per_s_ceiling == pytest.approx(248, abs=1)
    assert plan(MODEL_27B_INT4, GPU_PRESETS["A100-80G"]).decode_tokens_per_s_ceiling == pytest.approx(148, abs=1)


def test_prefill():
    p = plan(MODEL_27B_INT4, GPU_PRESETS["H100-SXM"], context_tokens=2000, prefill_utilization=0.6)
    assert p.prefill_tokens_per_s == pytest.approx(11_000, rel=0.01)
    assert p.prefill_seconds_for_context == pytest.approx(0.18, abs=0.005)


def test_concurrency_by_kv_memory_on_80gb_card():
    gpu = GPU_PRESETS["H100-SXM"]
    assert plan(MODEL_27B_INT4, gpu, context_tokens=2048).max_concurrent_requests_by_kv == pytest.approx(130, rel=0.05)
    assert plan(MODEL_27B_INT4, gpu, context_tokens=8192).max_concurrent_requests_by_kv == pytest.approx(33, abs=1)


def test_concurrency_at_rate_is_bandwidth_bound():
    gpu = GPU_PRESETS["H100-SXM"]
    slow = plan(MODEL_27B_INT4, gpu, target_tokens_per_s=20).max_concurrent_requests_at_target
    fast = plan(MODEL_27B_INT4, gpu, target_tokens_per_s=100).max_concurrent_requests_at_target
    # At 100 tok/s a step may take 10 ms: 33.5 GB/s... budget minus 13.5 GB of weights leaves 20 GB of KV.
    assert fast == int((3.35e12 / 100 - 13.5e9) // (2048 * 256 * KIB))
    assert fast < slow
    # Above the single-stream ceiling nothing fits.
    assert plan(MODEL_27B_INT4, gpu, target_tokens_per_s=300).max_concurrent_requests_at_target == 0

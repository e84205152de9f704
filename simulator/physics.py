"""One engine instance's arithmetic, from the capacity model (``infersight.capacity``).

Prefill is compute-bound: prompt tokens/s = achievable FLOP/s / (2 x params). Decode is
bandwidth-bound: every step reads all weights once plus the KV cache of every running request, so
the step time grows with batch size and context. The two constants below are assumptions, not
measurements: the share of peak DRAM bandwidth a decode step achieves, and the host-side time
between steps (scheduling, sampling; small with CUDA graphs and async scheduling).
"""

from __future__ import annotations

from dataclasses import dataclass

from infersight.capacity import GPUSpec, ModelSpec, kv_bytes_per_token, prefill_rate, weight_bytes

BANDWIDTH_EFFICIENCY = 0.95
STEP_OVERHEAD_S = 0.0015


@dataclass(frozen=True)
class Physics:
    model: ModelSpec
    gpu: GPUSpec
    weight_bytes: float
    kv_bytes_per_token: float
    kv_capacity_tokens: int
    prefill_tokens_per_s: float

    @classmethod
    def build(cls, model: ModelSpec, gpu: GPUSpec, prefill_utilization: float = 0.6,
              memory_utilization: float = 0.9) -> Physics:
        weights = weight_bytes(model)
        per_token = kv_bytes_per_token(model)
        capacity = max(0.0, gpu.memory_bytes * memory_utilization - weights)
        return cls(model, gpu, weights, per_token, int(capacity // per_token),
                   prefill_rate(model, gpu, prefill_utilization))

    def step_seconds(self, kv_tokens: float) -> float:
        """One decode step over a batch holding ``kv_tokens`` of KV cache (GPU time only)."""
        return (self.weight_bytes + kv_tokens * self.kv_bytes_per_token) / (
            self.gpu.bandwidth_bytes_per_s * BANDWIDTH_EFFICIENCY)

    def decode_flops(self, tokens: float) -> float:
        return 2.0 * self.model.params * tokens

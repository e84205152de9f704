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
GIB = 1 << 30


def max_batched_tokens(gpu: GPUSpec) -> int:
    """Tokens one engine step may hold: vLLM's ``--max-num-batched-tokens`` default for the OpenAI
    server (vllm/engine/arg_utils.py, ``get_batch_defaults``): 16384 on GPUs of 160 GiB or more,
    8192 on 70 GiB or more except A100s, 2048 otherwise. Decodes take one token each; a prefill
    gets the rest of the budget per step (chunked prefill), so a long prompt spans several steps."""
    if gpu.memory_bytes >= 160 * GIB:
        return 16384
    if gpu.memory_bytes >= 70 * GIB and "a100" not in gpu.name.lower():
        return 8192
    return 2048


@dataclass(frozen=True)
class Physics:
    model: ModelSpec
    gpu: GPUSpec
    weight_bytes: float
    kv_bytes_per_token: float
    kv_capacity_tokens: int
    prefill_tokens_per_s: float
    max_batched_tokens: int = 2048  # one step's token budget (see max_batched_tokens)

    @classmethod
    def build(cls, model: ModelSpec, gpu: GPUSpec, prefill_utilization: float = 0.6,
              memory_utilization: float = 0.9) -> Physics:
        weights = weight_bytes(model)
        per_token = kv_bytes_per_token(model)
        capacity = max(0.0, gpu.memory_bytes * memory_utilization - weights)
        return cls(model, gpu, weights, per_token, int(capacity // per_token),
                   prefill_rate(model, gpu, prefill_utilization), max_batched_tokens(gpu))

    def step_seconds(self, kv_tokens: float) -> float:
        """One decode step over a batch holding ``kv_tokens`` of KV cache (GPU time only)."""
        return (self.weight_bytes + kv_tokens * self.kv_bytes_per_token) / (
            self.gpu.bandwidth_bytes_per_s * BANDWIDTH_EFFICIENCY)

    def decode_flops(self, tokens: float) -> float:
        return 2.0 * self.model.params * tokens

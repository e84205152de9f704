"""Capacity model: turn model and GPU specs into the figures that size a fleet and set alerts.

The seed's arithmetic:
- KV bytes per token = layers x kv_heads x head_dim x 2 (K and V) x bytes per element.
- Decode is bound by memory bandwidth: every step reads all weights once, plus each running
  request's KV cache; the single-stream ceiling is bandwidth / weight bytes.
- Prefill is bound by compute: about 2 x params FLOPs per prompt token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pydantic import BaseModel, ConfigDict, Field

GIB = 1024**3
MIB = 1024**2
KIB = 1024


class GPUSpec(BaseModel):
    """One GPU type. Memory in bytes, bandwidth in bytes/s, compute in dense FLOP/s (fp16/bf16)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    memory_bytes: float = Field(gt=0)
    bandwidth_bytes_per_s: float = Field(gt=0)
    flops: float = Field(gt=0)
    tdp_watts: float = Field(gt=0)
    idle_watts: float = Field(gt=0)
    gpm: bool = Field(description="NVML GPM metrics supported (Hopper and newer)")


# Vendor datasheet figures (dense bf16 tensor FLOPs with sparsity where NVIDIA quotes it so;
# the reference H100 figure of 990 TFLOPS is the dense SXM number).
GPU_PRESETS: dict[str, GPUSpec] = {
    spec.name: spec
    for spec in [
        GPUSpec(name="A100-40G", memory_bytes=40 * GIB, bandwidth_bytes_per_s=1.555e12, flops=312e12,
                tdp_watts=400, idle_watts=50, gpm=False),
        GPUSpec(name="A100-80G", memory_bytes=80 * GIB, bandwidth_bytes_per_s=2.0e12, flops=312e12,
                tdp_watts=400, idle_watts=55, gpm=False),
        GPUSpec(name="H100-SXM", memory_bytes=80 * GIB, bandwidth_bytes_per_s=3.35e12, flops=990e12,
                tdp_watts=700, idle_watts=70, gpm=True),
        GPUSpec(name="H100-PCIe", memory_bytes=80 * GIB, bandwidth_bytes_per_s=2.0e12, flops=756e12,
                tdp_watts=350, idle_watts=50, gpm=True),
        GPUSpec(name="H200", memory_bytes=141 * GIB, bandwidth_bytes_per_s=4.8e12, flops=990e12,
                tdp_watts=700, idle_watts=75, gpm=True),
        GPUSpec(name="L40S", memory_bytes=48 * GIB, bandwidth_bytes_per_s=0.864e12, flops=362e12,
                tdp_watts=350, idle_watts=35, gpm=False),
    ]
}


class ModelSpec(BaseModel):
    """A transformer's shape, as far as serving capacity is concerned."""

    model_config = ConfigDict(extra="forbid")

    name: str = "model"
    params: float = Field(gt=0, description="parameter count, e.g. 27e9")
    layers: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    weight_bits: float = Field(default=16, gt=0, description="bits per weight (4 for int4/AWQ)")
    kv_bytes: float = Field(default=2, gt=0, description="bytes per KV element (2 for fp16, 1 for fp8)")


@dataclass(frozen=True)
class CapacityPlan:
    model: str
    gpu: str
    context_tokens: int
    kv_bytes_per_token: float
    kv_bytes_per_request: float
    weight_bytes: float
    kv_capacity_bytes: float
    kv_capacity_tokens: int
    max_concurrent_requests_by_kv: int
    decode_tokens_per_s_ceiling: float
    prefill_tokens_per_s: float
    prefill_seconds_for_context: float
    target_tokens_per_s_per_request: float
    max_concurrent_requests_at_target: int

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def kv_bytes_per_token(model: ModelSpec) -> float:
    return model.layers * model.kv_heads * model.head_dim * 2 * model.kv_bytes


def weight_bytes(model: ModelSpec) -> float:
    return model.params * model.weight_bits / 8


def decode_ceiling(model: ModelSpec, gpu: GPUSpec) -> float:
    """Tokens/s of one stream when every step reads all weights once (batch of 1)."""
    return gpu.bandwidth_bytes_per_s / weight_bytes(model)


def prefill_rate(model: ModelSpec, gpu: GPUSpec, utilization: float) -> float:
    """Prompt tokens/s: achievable FLOP/s over 2 x params FLOPs per token."""
    return gpu.flops * utilization / (2 * model.params)


def concurrency_at_rate(model: ModelSpec, gpu: GPUSpec, context_tokens: int, tokens_per_s: float) -> int:
    """How many requests can decode together while each still gets ``tokens_per_s``.

    One decode step must finish within 1 / tokens_per_s, and reads all weights plus every running
    request's KV cache: (weights + n x context x kv_per_token) / bandwidth <= 1 / rate.
    """
    step_budget_bytes = gpu.bandwidth_bytes_per_s / tokens_per_s
    spare = step_budget_bytes - weight_bytes(model)
    if spare <= 0:
        return 0
    return int(spare // (context_tokens * kv_bytes_per_token(model)))


def plan(
    model: ModelSpec,
    gpu: GPUSpec,
    context_tokens: int = 2048,
    prefill_utilization: float = 0.6,
    target_tokens_per_s: float = 20.0,
    memory_utilization: float = 1.0,
) -> CapacityPlan:
    """All capacity figures for one model on one GPU."""
    per_token = kv_bytes_per_token(model)
    weights = weight_bytes(model)
    kv_capacity = max(0.0, gpu.memory_bytes * memory_utilization - weights)
    by_kv = int(kv_capacity // (context_tokens * per_token))
    prefill = prefill_rate(model, gpu, prefill_utilization)
    at_target = min(by_kv, concurrency_at_rate(model, gpu, context_tokens, target_tokens_per_s))
    return CapacityPlan(
        model=model.name,
        gpu=gpu.name,
        context_tokens=context_tokens,
        kv_bytes_per_token=per_token,
        kv_bytes_per_request=per_token * context_tokens,
        weight_bytes=weights,
        kv_capacity_bytes=kv_capacity,
        kv_capacity_tokens=int(kv_capacity // per_token),
        max_concurrent_requests_by_kv=by_kv,
        decode_tokens_per_s_ceiling=decode_ceiling(model, gpu),
        prefill_tokens_per_s=prefill,
        prefill_seconds_for_context=context_tokens / prefill,
        target_tokens_per_s_per_request=target_tokens_per_s,
        max_concurrent_requests_at_target=at_target,
    )


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"

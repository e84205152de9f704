"""The /metrics formats simulated engines serve, by engine name (the engine collector's names).

A fleet can mix them: each pool says which engine its instances run (``engine`` in a scenario's
pool), and the real engine collector normalizes each into the one vocabulary, its ``engine``
label telling them apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType

from prometheus_client.samples import Sample

from infersight.collectors.engine.engines import SGLANG, VLLM
from infersight.simulator import disaggregation, sglang_format, vllm_format
from infersight.simulator.engine import SimEngine

FORMATS: dict[str, ModuleType] = {VLLM.name: vllm_format, SGLANG.name: sglang_format}
DEFAULT = VLLM.name


def bounds(engine: str) -> Mapping[str, Sequence[float]] | None:
    """The histogram bounds an engine's format uses (None: the simulator's default, vLLM's)."""
    return getattr(FORMATS[engine], "BOUNDS", None)


def families(engine: SimEngine) -> dict[str, list[Sample]]:
    if isinstance(engine, disaggregation.DecodeEngine):  # a KV consumer exposes its KV loads too
        return disaggregation.vllm_families(engine)
    return FORMATS[engine.kind].families(engine)


def exposition(engine: SimEngine) -> str:
    if isinstance(engine, disaggregation.DecodeEngine):
        return disaggregation.vllm_exposition(engine)
    return FORMATS[engine.kind].exposition(engine)

"""Helpers shared by the alert modules: template pieces and the labels test series carry."""

from __future__ import annotations

from infersight.alerts.promql import num

# Labels of the made-up fleet the promtool cases describe.
MODEL = "m1"
POOL = "stable"
STRATEGY = "least_loaded"
NODE = "n1"
# One identity per engine instance (DESIGN 10): the endpoint host:port on request, engine and
# gateway-health series alike.
INSTANCE = "e1:8000"


def lab(name: str) -> str:
    """``{{ $labels.NAME }}``"""
    return "{{ $labels." + name + " }}"


def val(decimals: int = 2) -> str:
    """``{{ $value | printf "%.Nf" }}``"""
    return '{{ $value | printf "%.' + str(decimals) + 'f" }}'


PCT = "{{ $value | humanizePercentage }}"


def pct(ratio: float) -> str:
    """A threshold ratio written as a percentage for people: 0.3 -> ``30%``."""
    return f"{num(ratio * 100)}%"


def request_labels(instance: str = INSTANCE, **extra: str) -> dict[str, str]:
    return {"model": MODEL, "instance": instance, "pool": POOL, "strategy": STRATEGY, **extra}


def instance_labels(instance: str = INSTANCE, **extra: str) -> dict[str, str]:
    return {"model": MODEL, "instance": instance, "pool": POOL, **extra}


def engine_labels(instance: str = INSTANCE, **extra: str) -> dict[str, str]:
    return {"instance": instance, "engine": "vllm", "model": MODEL, "pool": POOL, "node": NODE, "gpu": "0",
            "dp_rank": "0", "role": "mixed", **extra}


def gpu_labels(gpu: str = "0", **extra: str) -> dict[str, str]:
    return {"node": NODE, "gpu": gpu, "uuid": f"GPU-{gpu}", "gpu_model": "H100-SXM", **extra}


def require(condition: bool, message: str) -> None:
    """A test case must sit on the side of its threshold it claims; refuse to generate it otherwise."""
    if not condition:
        raise ValueError(f"test case design: {message}")

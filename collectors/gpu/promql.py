"""PromQL built from catalog signals for questions that join GPU and engine series.

Dashboards and alert rules call these instead of typing metric names.
"""

from __future__ import annotations

from collections.abc import Sequence

from infersight.signals import engine, gpu


def energy_per_token(window: str = "5m", by: Sequence[str] = ("node", "gpu"), **matchers: str) -> str:
    """Joules per generated token: GPU energy rate over the engines' generated-token rate.

    Both sides are summed ``by`` the join labels (``node`` and ``gpu`` by default: an engine on
    one GPU, labelled as its collector target is). Use ``by=("node",)`` when engines span several
    GPUs (tensor parallel, ``gpu="0,1"``) and ``by=()`` for the fleet. ``matchers`` narrow both
    sides (``node="n1"``). Windows without generated tokens give no result rather than +Inf.
    """
    for label in (*by, *matchers):
        if label not in gpu.ENERGY.labels or label not in engine.GENERATION_TOKENS.labels:
            raise ValueError(f"cannot join GPU and engine series on {label!r}: both carry only "
                             f"{sorted(set(gpu.ENERGY.labels) & set(engine.GENERATION_TOKENS.labels))}")
    energy = gpu.ENERGY.rate(window, **matchers)
    tokens = engine.GENERATION_TOKENS.rate(window, **matchers)
    if not by:
        return f"sum({energy}) / (sum({tokens}) > 0)"
    groups = ", ".join(by)
    return f"sum by ({groups}) ({energy}) / on ({groups}) (sum by ({groups}) ({tokens}) > 0)"

"""The alerts' names for the core threshold model (:mod:`infersight.thresholds`), and PromQL numbers.

``Limits`` is :class:`infersight.thresholds.Thresholds`: ``thresholds.*`` under their config names,
the SLO, the capacity model's figures, the burn windows and the selectors, built from the config by
:func:`limits_from_config` (which refuses settings no alert could work with).
"""

from __future__ import annotations

from infersight.thresholds import Thresholds as Limits
from infersight.thresholds import ThresholdsError as AlertsConfigError
from infersight.thresholds import thresholds_from_config as limits_from_config

__all__ = ["AlertsConfigError", "Limits", "limits_from_config", "num"]


def num(value: float) -> str:
    """A threshold as PromQL and people read it: ``0.144`` rather than ``0.14400000000000002``."""
    text = repr(round(float(value), 10))
    return text[:-2] if text.endswith(".0") else text

"""The signal catalog: the one list of every metric infersight produces.

Each metric is declared once, as a :class:`Signal`, in the domain module that owns it
(``gpu``, ``engine``, ``request``, ``gateway``, ``pipeline``). Collectors register from these
objects, and dashboards and alert rules build their PromQL from them, so a metric name is typed
exactly once in the whole code base.

    from infersight.signals import gpu
    gpu.MEMORY_BANDWIDTH_UTILIZATION.select(node="n1")
    # -> 'gpu_memory_bandwidth_utilization_ratio{node="n1"}'
"""

from __future__ import annotations

# Importing the domain modules fills the catalog.
from infersight.signals import engine, gateway, gpu, pipeline, request  # noqa: E402,F401
from infersight.signals.catalog import CATALOG, Kind, Signal, all_signals, get, validate_catalog

__all__ = [
    "CATALOG",
    "Kind",
    "Signal",
    "all_signals",
    "engine",
    "gateway",
    "get",
    "gpu",
    "pipeline",
    "request",
    "validate_catalog",
]

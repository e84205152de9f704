"""Prometheus text exposition without ``_created`` series, for every /metrics we serve.

prometheus_client adds a ``<name>_created`` gauge to every counter and histogram child in the
text format: ~10% more lines that nobody queries, and a series per label set that Prometheus must
store. :func:`without_created` wraps a registry so that its collection drops them, locally (no
process-wide switch such as ``PROMETHEUS_DISABLE_CREATED_SERIES`` that would change an embedding
application's own metrics); :func:`generate` renders it. benchmarks/exposition_scrape.py measures
it against prometheus_client's own rendering of the same registry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

__all__ = ["CONTENT_TYPE_LATEST", "generate", "without_created"]

_CREATED = "_created"


class _WithoutCreated:
    """A read-only view of a registry whose collection has no ``_created`` samples."""

    def __init__(self, registry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith(_CREATED)]
            yield family

    def restricted_registry(self, names: Iterable[str]) -> _WithoutCreated:
        # prometheus_client's HTTP handler calls this for /metrics?name[]=...
        return _WithoutCreated(self._registry.restricted_registry(names))


def without_created(registry) -> _WithoutCreated:
    """``registry`` as prometheus_client's HTTP server and ``generate_latest`` accept it, minus ``_created``."""
    return registry if isinstance(registry, _WithoutCreated) else _WithoutCreated(registry)


def generate(registry) -> bytes:
    """The text exposition (format 0.0.4) of ``registry`` without ``_created`` series."""
    return generate_latest(without_created(registry))

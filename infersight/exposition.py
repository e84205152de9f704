"""Prometheus text exposition without ``_created`` series, for every /metrics we serve.

prometheus_client adds a ``<name>_created`` gauge to every counter and histogram child in the
text format: ~10% more lines that nobody queries, and a series per label set that Prometheus must
store. :func:`without_created` wraps a registry so that its collection drops them, locally (no
process-wide switch such as ``PROMETHEUS_DISABLE_CREATED_SERIES`` that would change an embedding
application's own metrics); :func:`generate` renders it.

A collector may yield a :class:`RenderedFamily`: a family that writes its own text (the request
metrics do, from cached templates: ``instrumentation/series.py``). :func:`generate` takes that
text as it is and renders every other family with prometheus_client; anything else that reads the
family's ``samples`` (``generate_latest``, OpenMetrics, ``get_sample_value``) gets them built on
first use. benchmarks/exposition_scrape.py measures :func:`generate` against prometheus_client's
own rendering of the same registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

__all__ = ["CONTENT_TYPE_LATEST", "RenderedFamily", "generate", "without_created"]

_CREATED = "_created"


class RenderedFamily(Metric):
    """A metric family that renders its own text exposition; its samples are built when first read.

    ``exposition()`` must return what ``generate_latest`` would write for ``samples()`` (HELP
    and TYPE lines included, UTF-8), without ``_created`` series.
    """

    def __init__(self, name: str, documentation: str, typ: str, *, exposition: Callable[[], bytes],
                 samples: Callable[[], list]) -> None:
        # Metric.__init__ would assign samples = [] through the property below; the name and type
        # come from a Metric the collector already built (validated there).
        self.name, self.documentation, self.type, self.unit = name, documentation, typ, ""
        self._render: Callable[[], bytes] | None = exposition
        self._build, self._built = samples, None

    @property
    def samples(self) -> list:
        if self._built is None:
            self._built = self._build()
        return self._built

    @samples.setter
    def samples(self, value: list) -> None:
        # Replaced samples (a filter): the text is then rendered from them, not from the cells.
        self._built, self._render = list(value), None

    def exposition(self) -> bytes | None:
        """The family's text exposition, or None once its samples were replaced."""
        return self._render() if self._render is not None else None


class _WithoutCreated:
    """A read-only view of a registry whose collection has no ``_created`` samples."""

    def __init__(self, registry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if isinstance(family, RenderedFamily):
                yield family  # never has them
                continue
            family.samples = [s for s in family.samples if not s.name.endswith(_CREATED)]
            yield family

    def restricted_registry(self, names: Iterable[str]) -> _WithoutCreated:
        # prometheus_client's HTTP handler calls this for /metrics?name[]=...
        return _WithoutCreated(self._registry.restricted_registry(names))


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def without_created(registry) -> _WithoutCreated:
    """``registry`` as prometheus_client's HTTP server and ``generate_latest`` accept it, minus ``_created``."""
    return registry if isinstance(registry, _WithoutCreated) else _WithoutCreated(registry)


def generate(registry) -> bytes:
    """The text exposition (format 0.0.4) of ``registry`` without ``_created`` series."""
    parts: list[bytes] = []
    pending: list[Metric] = []  # consecutive ordinary families, rendered by prometheus_client at once

    def flush() -> None:
        if pending:
            parts.append(generate_latest(_Families(pending)))
            pending.clear()

    for family in without_created(registry).collect():
        text = family.exposition() if isinstance(family, RenderedFamily) else None
        if text is None:
            pending.append(family)
        else:
            flush()
            parts.append(text)
    flush()
    return b"".join(parts)

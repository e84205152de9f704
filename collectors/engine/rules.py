"""How one engine's series map onto the catalog's normalized ``llm_*`` signals.

An :class:`EngineSpec` is data: a list of :class:`Rule` (one engine family -> one signal, with
optional label filter, unit scale and fixed labels) plus an optional ``derive`` function for the
few values that need arithmetic over several samples (KV capacity = blocks x block size).
The per-engine tables live in :mod:`engines`; :mod:`normalize` applies them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.samples import Sample

from infersight.signals.catalog import Signal

# Engine family name (as the text parser reports it: counters without ``_total``) -> its samples.
Families = Mapping[str, Sequence[Sample]]
# A derived value: the signal, the engine labels it came from (for model and dp_rank), the value.
Derived = tuple[Signal, Mapping[str, str], float]


@dataclass(frozen=True)
class Rule:
    """Map one engine family onto ``signal``.

    ``sources`` lists the family's names across engine versions, current name first; the first
    one present in the exposition wins, so an engine that exposes both an old and a new name
    during a deprecation window is not counted twice.
    """

    signal: Signal
    sources: tuple[str, ...]
    # Keep only samples whose engine label has this value (or one of these values) ...
    where: tuple[tuple[str, str | tuple[str, ...]], ...] = ()
    # ... and drop those whose label has one of these values.
    unless: tuple[tuple[str, tuple[str, ...]], ...] = ()
    scale: float = 1.0  # unit conversion (ms -> s); for histograms it scales `le` and `_sum`
    take: str | None = None  # use only this series of the family, e.g. "_sum" of a histogram as a counter
    labels: tuple[tuple[str, str], ...] = ()  # fixed labels added, e.g. (("finish_reason", "error"),)
    relabel: tuple[tuple[str, str], ...] = ()  # engine label -> our label, e.g. finished_reason -> finish_reason
    # Engine label values renamed on the way (relabeled labels only), e.g. SGLang's prefill_cache -> local_cache_hit.
    rename: tuple[tuple[str, str], ...] = ()
    requires: str | None = None  # emit only when this family is present too (a ratio's other half)
    unless_family: str | None = None  # emit only when this family is absent (a fallback for a finer one)

    def keeps(self, labels: Mapping[str, str]) -> bool:
        for name, wanted in self.where:
            value = labels.get(name)
            if value != wanted and not (isinstance(wanted, tuple) and value in wanted):
                return False
        return not any(labels.get(name) in values for name, values in self.unless)


@dataclass(frozen=True)
class EngineSpec:
    name: str
    model_labels: tuple[str, ...]  # engine labels that carry the model name, in order of preference
    dp_label: str | None  # the engine's data-parallel rank label, exposed as dp_rank
    rules: tuple[Rule, ...]
    # The engine label that names the instance's prefill/decode role, and its values -> EngineRole values.
    role_label: str | None = None
    role_values: tuple[tuple[str, str], ...] = ()
    derive: Callable[[Families], list[Derived]] | None = None
    derive_sources: tuple[str, ...] = ()  # families `derive` reads
    derives: tuple[Signal, ...] = ()  # the signals `derive` computes (for the mapping table)
    line_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        # Every name a line of a wanted family can start with: HELP/TYPE names and sample names.
        names: set[str] = set()
        wanted = [src for rule in self.rules for src in rule.sources]
        wanted += [name for rule in self.rules for name in (rule.requires, rule.unless_family) if name]
        wanted += list(self.derive_sources)
        for family in wanted:
            names.update(family + suffix for suffix in ("", "_total", "_bucket", "_sum", "_count"))
        object.__setattr__(self, "line_names", frozenset(names))

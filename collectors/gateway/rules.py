"""How one gateway product's series map onto the catalog's gateway and request signals.

A :class:`SourceSpec` is data: :class:`Rule` s (one product family -> one signal, with a label filter,
extra labels and how colliding samples combine) plus an optional ``derive`` for values that need
arithmetic over two families (requests that succeeded = all requests - errored ones). The product
tables live in :mod:`products`; :mod:`normalize` applies them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.samples import Sample

from infersight.signals.catalog import Signal

Labels = Mapping[str, str]
# Product family (its exposed name: counters with their _total, histograms by base name) -> samples.
Families = Mapping[str, Sequence[Sample]]
# A derived value: the signal, the product labels it came from, extra catalog labels, the value.
Derived = tuple[Signal, Labels, dict[str, str], float]


@dataclass(frozen=True)
class Rule:
    """Map one product family onto ``signal``.

    ``sources`` lists the family's names across product versions, current name first: the first
    one present wins, so a product that writes its old and new names side by side during a
    deprecation window (the llm-d EPP does) is not counted twice.
    """

    signal: Signal
    sources: tuple[str, ...]
    take: str | None = None  # "_sum" or "_count" of a histogram family, as a counter
    where: Callable[[Labels], bool] | None = None  # keep only the samples this accepts
    extra: Callable[[Labels], dict[str, str]] | None = None  # catalog labels computed from product labels
    combine: str = "sum"  # samples that land on one series: "sum" (counters, queue depths) or "max" (states)


@dataclass(frozen=True)
class SourceSpec:
    kind: str
    model_labels: tuple[str, ...]  # product labels naming the model, in order of preference
    rules: tuple[Rule, ...]
    pool_labels: tuple[str, ...] = ()  # product labels naming the pool (else the target's pool)
    instance: Callable[[Labels], str] | None = None  # the backend endpoint host:port from product labels
    derive: Callable[[Families], list[Derived]] | None = None
    derive_sources: tuple[str, ...] = ()
    signature: tuple[str, ...] = ()  # name prefixes that identify the product in auto-detection
    # Labels naming a deployment (LiteLLM's model_id, litellm_model_name) that resolve to the model
    # through the samples that carry both: every series of one backend then has the same model.
    model_aliases: tuple[str, ...] = ()
    # Products whose per-backend gauges name no model (the production-stack router): take the model
    # the backend's other series name.
    model_by_instance: bool = False
    wanted: frozenset[str] = field(init=False)
    line_names: frozenset[str] = field(init=False)  # every name a line of a wanted family can start with

    def __post_init__(self) -> None:
        names = {src for rule in self.rules for src in rule.sources} | set(self.derive_sources)
        object.__setattr__(self, "wanted", frozenset(names))
        bases = names | {name[: -len("_total")] for name in names if name.endswith("_total")}
        lines = {base + suffix for base in bases for suffix in ("", "_total", "_bucket", "_sum", "_count")}
        object.__setattr__(self, "line_names", frozenset(lines))


def first_present(families: Families, names: Sequence[str]) -> str | None:
    return next((name for name in names if families.get(name)), None)

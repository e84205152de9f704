"""Parse a gateway's /metrics text, detect the product, and map it onto catalog samples.

Only the families some rule of the detected product wants are kept; every other label a product
writes (fairness ids, API key hashes, user names, client addresses) is dropped by construction:
the output carries exactly the catalog signal's labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from infersight.collectors.engine.scrape import ScrapeError
from infersight.collectors.exposition_lines import named_lines
from infersight.signals.catalog import Kind, Signal

from .products import SOURCES
from .rules import Families, Labels, Rule, SourceSpec, first_present

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


class GatewayFormatError(ScrapeError):
    """The exposition cannot be used; ``reason`` is the scrape-error label value (malformed, unrecognized)."""


@dataclass(frozen=True)
class TargetLabels:
    """What a gateway target contributes to its series (from the config or the command line)."""

    pool: str = ""
    strategy: str = ""
    model: str = ""  # overrides the product's model label when set


@dataclass
class Normalized:
    kind: str
    samples: dict[Signal, list[Sample]]

    def series_count(self) -> int:
        return sum(len(s) for s in self.samples.values())


def select_lines(text: str, kind: str | None) -> tuple[SourceSpec | None, str]:
    """The product (given, or detected from the names in the text) and only the lines of the families its
    rules want (see :mod:`infersight.collectors.exposition_lines`)."""
    lines = list(named_lines(text))
    spec = SOURCES[kind] if kind else detect({name for _line, name in lines})
    if spec is None:
        return None, ""
    return spec, "\n".join(line for line, name in lines if name in spec.line_names)


def parse_families(text: str) -> dict[str, list[Sample]]:
    """Samples by exposed family name: counters with their ``_total``, histograms by base name."""
    try:
        parsed = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, TypeError) as exc:
        raise GatewayFormatError("malformed", f"invalid Prometheus text: {exc}"[:300]) from None
    families: dict[str, list[Sample]] = {}
    for family in parsed:
        name = family.name
        if family.type == "counter" and family.samples and family.samples[0].name.endswith("_total"):
            name += "_total"
        families.setdefault(name, []).extend(family.samples)
    return families


def detect(families: Iterable[str]) -> SourceSpec | None:
    """The product whose signature a family name carries (the router before anything generic)."""
    names = list(families)
    for spec in SOURCES.values():
        if any(name.startswith(spec.signature) for name in names):
            return spec
    return None


def is_vllm_router(text: str) -> bool:
    """Whether a /metrics text is a vLLM production-stack router's (cheap: a substring search), so that
    the engine collector never takes a router for a vLLM engine."""
    return any(f"\n{name}" in text or text.startswith(name) for name in SOURCES["vllm-router"].signature)


def normalize(text: str, target: TargetLabels = TargetLabels(), kind: str | None = None) -> Normalized:
    spec, kept = select_lines(text, kind)
    families = parse_families(kept) if spec is not None else {}
    if spec is None or not any(families.get(name) for name in spec.wanted):
        parse_families(text)  # garbage says so (malformed) rather than "unrecognized"
        raise GatewayFormatError("unrecognized", _unrecognized(text, kind))
    return _Mapper(spec, target, families).run()


def _unrecognized(text: str, kind: str | None) -> str:
    """Why no product was found; an engine's /metrics (a common mix-up) says which command reads it,
    as the engine collector says for a router."""
    # Imported here: the engine normalizer imports this module (is_vllm_router).
    from infersight.collectors.engine.normalize import select_lines as engine_lines

    engine, _lines = engine_lines(text)
    if engine is not None:
        return (f"an inference engine's ({engine.name}) /metrics, not a gateway's: collect it with "
                "`infersight collect engine`")
    wanted = kind or ", ".join(SOURCES)
    return f"valid exposition but no series of {wanted} (is this the gateway's /metrics?)"


class _Mapper:
    def __init__(self, spec: SourceSpec, target: TargetLabels, families: Families):
        self.spec, self.target, self.families = spec, target, families
        self.out: dict[Signal, list[Sample]] = {}
        self.index: dict[tuple, int] = {}
        self._learn_names()

    def _learn_names(self) -> None:
        """What one sample says about another's labels: a deployment id's model, a model's pool, a
        backend's model. A family without a pool label (the EPP's request families) then gets the pool
        its flow-control family names for the same model, so the series of one source join."""
        spec = self.spec
        self.alias_model: dict[str, str] = {}
        self.model_pool: dict[str, str] = {}
        self.instance_model: dict[str, str] = {}
        for name in spec.wanted:
            for sample in self.families.get(name, ()):
                labels = sample.labels
                chosen = next((k for k in spec.model_labels if labels.get(k)), None)
                if chosen is None:
                    continue
                model = labels[chosen]
                if chosen not in spec.model_aliases:  # a group name: what its aliases resolve to
                    for alias in spec.model_aliases:
                        if labels.get(alias):
                            self.alias_model.setdefault(labels[alias], model)
                pool = next((labels[k] for k in spec.pool_labels if labels.get(k)), "")
                if pool:
                    self.model_pool.setdefault(model, pool)
                if spec.model_by_instance and spec.instance:
                    instance = spec.instance(labels)
                    if instance:
                        self.instance_model.setdefault(instance, model)

    def _model(self, product: Labels, instance: str) -> str:
        spec = self.spec
        for alias in spec.model_aliases:  # a deployment id first: it names the model group exactly
            value = product.get(alias)
            if value and value in self.alias_model:
                return self.alias_model[value]
        model = next((product[k] for k in spec.model_labels if product.get(k)), "")
        return model or self.instance_model.get(instance, "")

    def run(self) -> Normalized:
        for rule in self.spec.rules:
            source = first_present(self.families, rule.sources)
            if source is not None:
                self._apply(rule, source)
        if self.spec.derive:
            for signal, product_labels, extra, value in self.spec.derive(self.families):
                self._emit(signal, signal.name, self._labels(signal, product_labels, extra), value, "sum")
        return Normalized(self.spec.kind, {k: v for k, v in self.out.items() if v})

    def _labels(self, signal: Signal, product: Labels, extra: dict[str, str]) -> dict[str, str]:
        spec, target = self.spec, self.target
        instance = spec.instance(product) if spec.instance else ""
        model = target.model or self._model(product, instance)
        pool = target.pool or next((product[k] for k in spec.pool_labels if product.get(k)), "")
        pool = pool or self.model_pool.get(model, "")
        values = {"model": model, "pool": pool, "strategy": target.strategy, "instance": instance, **extra}
        return {label: str(values.get(label, "")) for label in signal.labels}

    def _apply(self, rule: Rule, source: str) -> None:
        signal = rule.signal
        histogram = signal.kind is Kind.HISTOGRAM and rule.take is None
        for sample in self.families[source]:
            name = sample.name
            if rule.take is not None:
                if name != source + rule.take:
                    continue
                series = signal.name
            elif histogram:
                suffix = name[len(source):]
                if suffix not in HISTOGRAM_SERIES:
                    continue
                series = signal.name + suffix
            elif name in (source, source + "_total") or source.endswith("_total") and name == source:
                series = signal.name
            else:
                continue
            product = sample.labels
            if rule.where and not rule.where(product):
                continue
            labels = self._labels(signal, product, rule.extra(product) if rule.extra else {})
            if histogram and series.endswith("_bucket"):
                le = product.get("le")
                if le is None:
                    continue
                labels["le"] = le
            self._emit(signal, series, labels, sample.value, rule.combine)

    def _emit(self, signal: Signal, series: str, labels: dict[str, str], value: float, combine: str) -> None:
        """Product labels we drop (fairness ids, priorities, status codes) make samples collide:
        they add up (or keep the highest, for states)."""
        key = (series, *labels.items())
        samples = self.out.setdefault(signal, [])
        position = self.index.get(key)
        if position is None:
            self.index[key] = len(samples)
            samples.append(Sample(series, labels, value))
            return
        previous = samples[position]
        merged = max(previous.value, value) if combine == "max" else previous.value + value
        samples[position] = previous._replace(value=merged)

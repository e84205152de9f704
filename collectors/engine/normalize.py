"""Parse an engine's /metrics text and turn it into normalized catalog samples.

Speed matters (one collector scrapes a whole fleet), and prometheus_client's text parser costs
~13 us per line. So the text is first cut down to the lines of the families some rule wants
(a set lookup per line), and only those lines go through the parser. Lines we drop are never
read, so garbage in an unmapped family cannot break a target; garbage in a mapped one fails the
whole target (never half a target).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from infersight.collectors.exposition_lines import named_lines
from infersight.collectors.gateway.normalize import is_vllm_router
from infersight.signals.catalog import Kind, Signal
from infersight.signals.engine import EngineRole

from .engines import ENGINES
from .rules import EngineSpec, Rule
from .scrape import ScrapeError

_LINE_OWNER: dict[str, EngineSpec] = {name: spec for spec in ENGINES.values() for name in spec.line_names}
_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


class NormalizeError(ScrapeError):
    """The exposition cannot be used; ``reason`` is the scrape-error label value (malformed, ...)."""


@dataclass(frozen=True)
class TargetLabels:
    """The labels a target contributes to each of its series (from config, CLI or file_sd)."""

    instance: str  # the engine endpoint host:port (DESIGN 10)
    pool: str = ""
    node: str = ""
    gpu: str = ""
    model: str = ""  # overrides the engine's own model label when set
    role: str = ""  # overrides the role the engine tells (prefill, decode, mixed)


@dataclass
class Normalized:
    engine: str
    samples: dict[Signal, list[Sample]]
    dropped_duplicates: int = 0
    dropped_incomplete: int = 0  # histogram series without a +Inf bucket
    model: str = ""  # the target's model: configured, else the first model label the engine exposed

    def series_count(self) -> int:
        return sum(len(s) for s in self.samples.values())


def select_lines(text: str, engine: str | None = None) -> tuple[EngineSpec | None, list[str]]:
    """The lines of families some rule wants, and the engine they belong to.

    With ``engine`` None the engine is detected: the owner of the first wanted line.
    """
    spec = ENGINES[engine] if engine else None
    kept: list[str] = []
    for line, name in named_lines(text):
        owner = _LINE_OWNER.get(name)
        if owner is None:
            continue
        if spec is None:
            spec = owner
        elif owner is not spec:
            continue
        kept.append(line)
    return (spec if kept else None), kept


def normalize(text: str, labels: TargetLabels, engine: str | None = None) -> Normalized:
    """Normalize one target's exposition; raise :class:`NormalizeError` when it is unusable."""
    spec, lines = select_lines(text, engine)
    if spec is None:
        raise NormalizeError(*_classify_unrecognized(text, engine))
    if engine is None and spec.name == "vllm" and is_vllm_router(text):
        # A production-stack router writes vllm: names too (per-backend copies); it is not an engine.
        raise NormalizeError("unrecognized", "a vLLM production-stack router's /metrics, not an engine's: collect "
                                             "it with `infersight collect gateway`")
    try:
        parsed = list(text_string_to_metric_families("\n".join(lines)))
    except (ValueError, IndexError, TypeError) as exc:
        raise NormalizeError("malformed", f"invalid Prometheus text: {exc}"[:300]) from None
    families: dict[str, list[Sample]] = {}
    for family in parsed:
        families.setdefault(_family_name(family), []).extend(family.samples)
    return _Mapper(spec, labels, families).run()


def normalize_families(families: dict[str, list[Sample]], labels: TargetLabels, engine: str) -> Normalized:
    """Normalize families already parsed, keyed as the text parser keys them (counters without
    ``_total``): the simulator holds its engines' samples in memory and skips the text in virtual time."""
    return _Mapper(ENGINES[engine], labels, families).run()


def _family_name(family) -> str:
    """The family a parsed family belongs to. Samples the parser could not place under their TYPE
    line (``x_total`` under ``# TYPE x counter``, ``_created`` lines, lines with no TYPE at all)
    arrive as untyped one-sample families: put them back under their base name."""
    name = family.name
    if family.type in ("untyped", "unknown"):
        for suffix in ("_total", "_bucket", "_sum", "_count", "_created"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
    return name


def _classify_unrecognized(text: str, engine: str | None) -> tuple[str, str]:
    try:
        for _ in text_string_to_metric_families(text):
            pass
    except (ValueError, IndexError, TypeError) as exc:
        return "malformed", f"invalid Prometheus text: {exc}"[:300]
    wanted = engine or ", ".join(ENGINES)
    return "unrecognized", f"valid exposition but no series of {wanted} (is this the engine's /metrics?)"


def _drop_incomplete_histograms(samples: list[Sample]) -> int:
    """Remove, in place, histogram series that lack the +Inf bucket the exposition formats require
    (a strict OpenMetrics reader would reject our whole /metrics for one such engine series).
    Returns how many series were dropped."""
    complete = {tuple(v for k, v in s.labels.items() if k != "le") for s in samples
                if s.labels.get("le") == "+Inf"}
    kept = [s for s in samples if tuple(v for k, v in s.labels.items() if k != "le") in complete]
    dropped = len(samples) - len(kept)
    samples[:] = kept
    return dropped


class _Mapper:
    """Applies one engine's rules to the parsed families of one scrape."""

    def __init__(self, spec: EngineSpec, labels: TargetLabels, families: dict[str, list[Sample]]):
        self.spec = spec
        self.target = labels
        self.families = families
        self.out: dict[Signal, list[Sample]] = {}
        self.index: dict[tuple, int] = {}  # (series name, label values) -> position in out[signal]
        self.duplicates = 0
        self.default_model = labels.model or self._first_model()
        self.roles = dict(spec.role_values)
        # Engines put the role label on some families only (SGLang: scheduler metrics, not the
        # tokenizer's): the first role found names the whole instance.
        self.default_role = labels.role or self._first_role() or EngineRole.MIXED.value

    def run(self) -> Normalized:
        for rule in self.spec.rules:
            if rule.requires and rule.requires not in self.families:
                continue
            if rule.unless_family and rule.unless_family in self.families:
                continue
            source = next((name for name in rule.sources if name in self.families), None)
            if source is not None:
                self._apply(rule, source, self.families[source])
        if self.spec.derive:
            for signal, engine_labels, value in self.spec.derive(self.families):
                self._emit(signal, signal.name, self._labels(engine_labels, ()), value)
        incomplete = sum(_drop_incomplete_histograms(samples) for signal, samples in self.out.items()
                         if signal.kind is Kind.HISTOGRAM)
        return Normalized(self.spec.name, {k: v for k, v in self.out.items() if v}, self.duplicates, incomplete,
                          self.default_model)

    def _first_model(self) -> str:
        for samples in self.families.values():
            for sample in samples:
                for label in self.spec.model_labels:
                    if sample.labels.get(label):
                        return sample.labels[label]
        return ""

    def _first_role(self) -> str:
        label = self.spec.role_label
        if label is None:
            return ""
        for samples in self.families.values():
            for sample in samples:
                role = self.roles.get(sample.labels.get(label, ""))
                if role:
                    return role
        return ""

    def _labels(self, engine_labels, extra: Iterable[tuple[str, str]]) -> dict[str, str]:
        t = self.target
        model = t.model
        if not model:
            model = next((engine_labels[k] for k in self.spec.model_labels if engine_labels.get(k)),
                         self.default_model)
        dp_rank = engine_labels.get(self.spec.dp_label, "") if self.spec.dp_label else ""
        role = t.role
        if not role and self.spec.role_label:
            role = self.roles.get(engine_labels.get(self.spec.role_label, ""), "")
        out = {"instance": t.instance, "engine": self.spec.name, "model": model, "pool": t.pool, "node": t.node,
               "gpu": t.gpu, "dp_rank": dp_rank, "role": role or self.default_role}
        out.update(extra)
        return out

    def _apply(self, rule: Rule, source: str, samples: list[Sample]) -> None:
        signal = rule.signal
        histogram = signal.kind is Kind.HISTOGRAM and rule.take is None
        for sample in samples:
            name = sample.name
            if rule.take is not None:
                if name != source + rule.take:
                    continue
                series = signal.name
            elif histogram:
                suffix = name[len(source):]
                if suffix not in _HISTOGRAM_SERIES:
                    continue  # _created, or a family of another type under this name
                series = signal.name + suffix
            elif name == source or name == source + "_total":
                series = signal.name
            else:
                continue  # _created and the like
            engine_labels = sample.labels
            if (rule.where or rule.unless) and not rule.keeps(engine_labels):
                continue
            extra = list(rule.labels)
            if rule.relabel:
                rename = dict(rule.rename)
                for theirs, ours in rule.relabel:
                    value = engine_labels.get(theirs, "")
                    extra.append((ours, rename.get(value, value)))
            value = sample.value
            if histogram and series.endswith("_bucket"):
                le = engine_labels.get("le")
                if le is None:
                    continue
                if rule.scale != 1.0 and le != "+Inf":
                    le = floatToGoString(float(le) * rule.scale)
                extra.append(("le", le))
            elif rule.scale != 1.0 and not (histogram and series.endswith("_count")):
                value = value * rule.scale
            self._emit(signal, series, self._labels(engine_labels, extra), value)

    def _emit(self, signal: Signal, series: str, labels: dict[str, str], value: float) -> None:
        """Add one sample. Engine labels we drop (Triton's `version`, TGI's `err`) can make two
        samples collide: counters and histogram series are summed, a gauge keeps its first value."""
        key = (series, *labels.values())
        samples = self.out.setdefault(signal, [])
        position = self.index.get(key)
        if position is None:
            self.index[key] = len(samples)
            samples.append(Sample(series, labels, value))
            return
        self.duplicates += 1
        if signal.kind is not Kind.GAUGE:
            previous = samples[position]
            samples[position] = previous._replace(value=previous.value + value)

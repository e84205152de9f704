"""The engine -> signal mapping as a Markdown table, generated from the rules (README.md holds a copy;
a test keeps the two equal)."""

from __future__ import annotations

from infersight.signals import engine as sig
from infersight.signals.catalog import Signal

from .engines import ENGINES
from .rules import EngineSpec, Rule


def mapping_table() -> str:
    signals: list[Signal] = []
    for spec in ENGINES.values():
        for signal in [rule.signal for rule in spec.rules] + list(spec.derives):
            if signal not in signals:
                signals.append(signal)
    signals.sort(key=lambda s: s.name)
    lines = ["| signal | " + " | ".join(ENGINES) + " |", "|---|" + "---|" * len(ENGINES)]
    for signal in signals:
        cells = [_cell(spec, signal) for spec in ENGINES.values()]
        lines.append(f"| `{signal.name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(spec: EngineSpec, signal: Signal) -> str:
    parts = [_describe(rule) for rule in spec.rules if rule.signal is signal]
    if signal in spec.derives:
        sources = [name for name in spec.derive_sources if _feeds(name, signal)]
        parts.append("computed from " + ", ".join(f"`{name}`" for name in sources))
    return "<br>".join(parts) or "-"


def _feeds(family: str, signal: Signal) -> bool:
    """Which derive source feeds which derived signal (sleep state -> sleep level, the rest -> capacity)."""
    return ("sleep_state" in family) == (signal is sig.SLEEP_LEVEL)


def _values(value) -> str:
    return "\\|".join(value) if isinstance(value, tuple) else str(value)


def _describe(rule: Rule) -> str:
    notes = [",".join(f"{k}={_values(v) or '(any)'}" for k, v in rule.where)] if rule.where else []
    notes += [f"{k}!={_values(v)}" for k, v in rule.unless]
    notes += [f"by {ours}" if theirs == ours else f"{theirs} as {ours}" for theirs, ours in rule.relabel]
    notes += [f"{a}->{b}" for a, b in rule.rename]
    if rule.take:
        notes.append(f"its `{rule.take}`")
    if rule.scale != 1.0:
        notes.append(f"x {rule.scale:g}")
    notes += [f"{k}={v}" for k, v in rule.labels]
    if rule.requires:
        notes.append(f"only with `{rule.requires}`")
    if rule.unless_family:
        notes.append(f"only without `{rule.unless_family}`")
    sources = " or ".join(f"`{name}`" for name in rule.sources)
    return sources + (f" ({'; '.join(notes)})" if notes else "")


if __name__ == "__main__":  # pragma: no cover - regenerate the README table
    print(mapping_table())

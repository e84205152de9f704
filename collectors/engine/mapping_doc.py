"""The engine -> signal mapping as a Markdown table, generated from the rules (README.md holds a copy;
a test keeps the two equal)."""

from __future__ import annotations

from infersight.signals import engine as sig
from infersight.signals.catalog import Signal

from .engines import ENGINES
from .rules import EngineSpec, Rule


def mapping_table() -> str:
    signals: list[Signal] = [sig.KV_CACHE_CAPACITY]
    for spec in ENGINES.values():
        signals += [rule.signal for rule in spec.rules if rule.signal not in signals]
    signals.sort(key=lambda s: s.name)
    lines = ["| signal | " + " | ".join(ENGINES) + " |", "|---|" + "---|" * len(ENGINES)]
    for signal in signals:
        cells = [_cell(spec, signal) for spec in ENGINES.values()]
        lines.append(f"| `{signal.name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(spec: EngineSpec, signal: Signal) -> str:
    parts = [_describe(rule) for rule in spec.rules if rule.signal is signal]
    if signal is sig.KV_CACHE_CAPACITY and spec.derive:
        parts.append("computed from " + ", ".join(f"`{name}`" for name in spec.derive_sources))
    return "<br>".join(parts) or "-"


def _describe(rule: Rule) -> str:
    notes = [",".join(f"{k}={v}" for k, v in rule.where)] if rule.where else []
    if rule.take:
        notes.append(f"its `{rule.take}`")
    if rule.scale != 1.0:
        notes.append(f"x {rule.scale:g}")
    notes += [f"{k}={v}" for k, v in rule.labels]
    if rule.requires:
        notes.append(f"only with `{rule.requires}`")
    sources = " or ".join(f"`{name}`" for name in rule.sources)
    return sources + (f" ({'; '.join(notes)})" if notes else "")


if __name__ == "__main__":  # pragma: no cover - regenerate the README table
    print(mapping_table())

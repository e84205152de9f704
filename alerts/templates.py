"""Render the small subset of Prometheus alert templates our descriptions use, as Prometheus does.

Expected annotations in the promtool tests come from here. Only three forms are allowed, so a
description that Prometheus would render differently cannot slip in:
``{{ $labels.NAME }}``, ``{{ $value | printf "%.Nf" }}`` and ``{{ $value | humanizePercentage }}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ACTION_RE = re.compile(r"\{\{(.*?)\}\}")
LABEL_RE = re.compile(r"^\s*\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)\s*$")
PRINTF_RE = re.compile(r'^\s*\$value\s*\|\s*printf\s+"(%\.\d+f)"\s*$')
PERCENT_RE = re.compile(r"^\s*\$value\s*\|\s*humanizePercentage\s*$")


class TemplateError(ValueError):
    pass


def _format_value(action: str, value: float) -> str | None:
    if m := PRINTF_RE.match(action):
        return m.group(1) % value
    if PERCENT_RE.match(action):
        # Prometheus: fmt.Sprintf("%.4g%%", v*100); Python's %g matches Go's for these values.
        return "%.4g%%" % (value * 100)
    return None


def render(template: str, labels: Mapping[str, str], value: float) -> str:
    """The text Prometheus produces for ``template`` with these labels and value."""

    def substitute(match: re.Match[str]) -> str:
        action = match.group(1)
        if m := LABEL_RE.match(action):
            return labels.get(m.group(1), "")
        formatted = _format_value(action, value)
        if formatted is None:
            raise TemplateError(f"unsupported template action {{{{{action}}}}} in {template!r}")
        return formatted

    return ACTION_RE.sub(substitute, template)


def check_clear_of_rounding(template: str, value: float) -> None:
    """Fail when ``value`` sits so close to a rounding edge that float noise could flip the text.

    PromQL reaches a value through rates and interpolation; a last-bit difference must not change
    the expected annotation, so test cases pick values away from those edges.
    """
    texts = {render(template, {}, value * (1 + eps)) for eps in (-1e-9, 0.0, 1e-9)}
    if len(texts) > 1:
        raise TemplateError(f"value {value!r} is on a rounding edge for {template!r}; choose another test value")

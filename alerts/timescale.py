"""The generated rules on a compressed clock: every duration divided by ``speed``, thresholds kept.

The real-time demo runs the simulated fleet ``speed`` times faster than the wall clock (60: one
simulated minute a second), and Prometheus knows only real seconds. So the demo's Prometheus gets
the rules of ``alerts build`` with every window, ``offset``, ``for:``, ``predict_linear`` horizon
and cold-start age divided by ``speed`` (``rate(x[5m])`` reads 5 s, ``for: 2m`` waits 2 s), and
Alertmanager's waits likewise. Evaluated every second on one scrape a second, each rule then sees
what it sees in the alert-quality test, where promtool steps one simulated minute at a time.

Thresholds stay as they are: the fleet's values are its own (seconds of TTFT, ratios, counts,
gauges). Per-second rates are the exception: per real second, a simulated rate reads ``speed``
times higher, so every ``rate()`` and ``deriv()`` is divided by ``speed`` and reads per simulated
second again (prompt tokens to prefill against the capacity model's tokens/s, requests queued over
the pool's completions per second); a ratio of two rates is the same either way. :func:`scale_expr`
refuses the time-valued functions it cannot scale, so a new rule of that kind fails loudly instead
of firing wrong in the demo.
"""

from __future__ import annotations

import re
from typing import Any

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}
_DURATION = r"(?:\d+(?:ms|s|m|h|d|w|y))+"
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_RANGE = re.compile(rf"\[({_DURATION})(?::({_DURATION})?)?\]")
_OFFSET = re.compile(rf"\boffset\s+(-?)({_DURATION})")
# younger_than(): ``(time() - <selector> < SECONDS)``
_AGE = re.compile(r"(\(time\(\) - [a-zA-Z_:][\w:]*(?:\{[^{}]*\})? < )([0-9.e+]+)(\))")
# Time-valued things the scaling cannot carry: refused.
_UNSCALABLE = re.compile(r"\b(irate|timestamp|holt_winters|double_exponential_smoothing|day_of_month|day_of_week|"
                         r"day_of_year|days_in_month|hour|minute|month|year)\s*\(|@\s*\d")


class TimescaleError(ValueError):
    """A rule the compressed clock cannot carry; the message names it and why."""


def duration_ms(text: str) -> int:
    """``1h30m`` -> 5400000."""
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise TimescaleError(f"{text!r} is not a Prometheus duration")
    return sum(int(n) * UNITS_MS[u] for n, u in parts)


def format_ms(ms: int) -> str:
    """The shortest exact Prometheus duration: 5000 -> ``5s``, 500 -> ``500ms``, 4320000 -> ``72m``."""
    if ms <= 0:
        raise TimescaleError("a scaled duration must stay above 0 ms")
    for unit in ("d", "h", "m", "s"):
        if ms % UNITS_MS[unit] == 0:
            return f"{ms // UNITS_MS[unit]}{unit}"
    return f"{ms}ms"


def scale_duration(text: str, speed: float, exact: bool = True) -> str:
    """``text`` / ``speed``; ``exact``: refuse a result that is not a whole number of milliseconds."""
    ms = duration_ms(text)
    scaled = max(1, round(ms / speed))
    if exact and abs(scaled * speed - ms) > 1e-6 * ms:
        raise TimescaleError(f"{text} / {speed:g} is not a whole number of milliseconds")
    return format_ms(scaled)


def _scale_seconds(value: str, speed: float) -> str:
    scaled = float(value) / speed
    return f"{scaled:g}"


def _closing(expr: str, j: int, function: str) -> tuple[int, list[int]]:
    """From just inside ``function(`` at ``j``: the index after its closing parenthesis, and where its
    top-level commas are."""
    depth, commas = 1, []
    while depth:
        if j >= len(expr):
            raise TimescaleError(f"unbalanced parentheses after {function} in {expr!r}")
        c = expr[j]
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 1:
            commas.append(j)
        j += 1
    return j, commas


def _scale_predict_linear(expr: str, speed: float) -> str:
    """The horizon (seconds) of every ``predict_linear(v, SECONDS)``: its last top-level argument."""
    out, i = [], 0
    while (start := expr.find("predict_linear(", i)) >= 0:
        j, commas = _closing(expr, start + len("predict_linear("), "predict_linear")
        comma = commas[-1] if commas else -1
        if comma < 0:
            raise TimescaleError(f"predict_linear without a horizon in {expr!r}")
        horizon = expr[comma + 1:j - 1].strip()
        if not re.fullmatch(r"[0-9.e+]+", horizon):
            raise TimescaleError(f"predict_linear horizon {horizon!r} is not a number of seconds")
        out.append(expr[i:comma + 1] + " " + _scale_seconds(horizon, speed) + ")")
        i = j
    out.append(expr[i:])
    return "".join(out)


_PER_SECOND = re.compile(r"\b(rate|deriv)\(")


def _per_simulated_second(expr: str, speed: float) -> str:
    """Every ``rate(...)`` and ``deriv(...)`` divided by ``speed``: per simulated second, not per real one."""
    out, i = [], 0
    while (m := _PER_SECOND.search(expr, i)) is not None:
        j, _ = _closing(expr, m.end(), m.group(1))
        inner = _per_simulated_second(expr[m.end():j - 1], speed)
        out.append(f"{expr[i:m.start()]}({m.group(1)}({inner}) / {speed:g})")
        i = j
    out.append(expr[i:])
    return "".join(out)


def scale_expr(expr: str, speed: float) -> str:
    """``expr`` with its durations (ranges, subqueries, offsets, horizons, ages) divided by ``speed``, and
    its per-second rates read per simulated second."""
    bad = _UNSCALABLE.search(expr)
    if bad:
        raise TimescaleError(f"{bad.group(0).strip()!r} reads the clock in a way a compressed clock cannot carry: "
                             f"{expr!r}")
    if expr.count("time()") != len(_AGE.findall(expr)):
        raise TimescaleError(f"time() outside a cold-start age test `(time() - START < SECONDS)`: {expr!r}")

    def rng(m: re.Match) -> str:
        step = m.group(2)
        inner = scale_duration(m.group(1), speed)
        if m.group(0).find(":") >= 0:
            inner += ":" + (scale_duration(step, speed) if step else "")
        return f"[{inner}]"

    expr = _RANGE.sub(rng, expr)
    expr = _OFFSET.sub(lambda m: f"offset {m.group(1)}{scale_duration(m.group(2), speed)}", expr)
    expr = _AGE.sub(lambda m: m.group(1) + _scale_seconds(m.group(2), speed) + m.group(3), expr)
    return _per_simulated_second(_scale_predict_linear(expr, speed), speed)


def scale_rule_file(document: dict[str, Any], speed: float) -> dict[str, Any]:
    """A rule file (``groups:``) with every rule's ``expr`` and ``for`` scaled."""
    groups = []
    for group in document.get("groups", []):
        rules = []
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            try:
                scaled = {**rule, "expr": scale_expr(rule["expr"], speed)}
                if "for" in rule:
                    scaled["for"] = scale_duration(rule["for"], speed)
            except TimescaleError as exc:
                raise TimescaleError(f"rule {name}: {exc}") from None
            rules.append(scaled)
        groups.append({**group, "rules": rules})
    return {**document, "groups": groups}


ALERTMANAGER_WAITS = ("group_wait", "group_interval", "repeat_interval")


def scale_alertmanager(config: dict[str, Any], speed: float) -> dict[str, Any]:
    """Alertmanager's route waits and ``resolve_timeout`` divided by ``speed`` (to the millisecond)."""

    def route(r: dict[str, Any]) -> dict[str, Any]:
        out = {k: (scale_duration(v, speed, exact=False) if k in ALERTMANAGER_WAITS else v) for k, v in r.items()}
        if "routes" in r:
            out["routes"] = [route(child) for child in r["routes"]]
        return out

    scaled = {**config, "route": route(config["route"])}
    if "resolve_timeout" in config.get("global", {}):
        scaled["global"] = {**config["global"],
                            "resolve_timeout": scale_duration(config["global"]["resolve_timeout"], speed, exact=False)}
    return scaled

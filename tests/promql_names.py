"""Which of our metric names a PromQL expression reads: the loop-closing tests of alerts and dashboards."""

from __future__ import annotations

import re

IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# Raw series (llm_, gpu_, infersight_) and recording rules (level:metric:operations).
OURS = re.compile(r"^(llm_|gpu_|infersight_|[a-z_]*:)")


def metric_names(expr: str) -> set[str]:
    """Metric-like identifiers outside label matchers and strings."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    without_matchers = re.sub(r"\{[^}]*\}", "", without_strings)
    without_groupings = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "",
                               without_matchers)
    return {t for t in IDENTIFIER.findall(without_groupings) if OURS.match(t)}

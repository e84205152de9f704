"""Cut a Prometheus text exposition down to the lines of the families a mapper wants, before parsing.

prometheus_client's text parser costs ~10-100 us a line, and engines, gateways and dcgm-exporter
write many families we do not map, so the engine, gateway and dcgm mappers keep only the lines of
wanted families (a set lookup per line) and parse those. Lines dropped here are never parsed:
garbage in an unmapped family cannot break a target.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterator

_SAMPLE_NAME = re.compile(r"[^{\s]+")


def named_lines(text: str) -> Iterator[tuple[str, str]]:
    """Each non-empty line, stripped, with the metric name it is about: a sample's name, the name in
    a HELP or TYPE line, ``""`` for any other comment."""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            yield line, (parts[2] if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") else "")
        else:
            match = _SAMPLE_NAME.match(line)
            yield line, (match.group(0) if match else "")


def lines_named(text: str, names: Container[str]) -> str:
    """The lines of ``text`` about one of ``names``, joined for the text parser."""
    return "\n".join(line for line, name in named_lines(text) if name in names)

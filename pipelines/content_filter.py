"""Which attributes carry prompt and completion text: the one content filter (DESIGN 11).

Unless ``pipeline.store_content`` is true, these keys are dropped from span, resource, event and link
attributes, compared case-insensitively. The receiver renders :func:`pattern` into its insert SQL
(ClickHouse ``match``, RE2), and ``infersight otelcol render`` renders the same pattern into the
Collector's ``transform`` processor (OTTL ``delete_matching_keys``, Go regexp); both dialects read
``(?i)^(...)`` the same way.

Conventions covered:

- OpenTelemetry GenAI, current and older: ``gen_ai.input.messages``, ``gen_ai.output.messages``,
  ``gen_ai.system_instructions``, ``gen_ai.prompt*`` / ``gen_ai.completion*`` (``gen_ai.prompt.0.content``
  ...), ``gen_ai.event.content``, tool call arguments and results;
- OpenInference (Arize/Phoenix): ``input.value``, ``output.value``, ``llm.input_messages.*``,
  ``llm.output_messages.*``, ``llm.prompts``, ``llm.prompt_template.*``;
- OpenLLMetry / Traceloop: ``llm.prompts.*``, ``llm.completions.*`` (``llm.prompt*``, ``llm.completion*``);
- span events of the GenAI event conventions (``gen_ai.user.message``, ``gen_ai.choice`` ...), whose
  attributes ``content``, ``message`` and ``tool_calls`` hold the text: dropped from event attributes.

Prefixes match without a boundary on purpose (``gen_ai.prompt`` also drops ``gen_ai.prompt_template``):
a false drop loses an attribute, a missed one stores a prompt.
"""

from __future__ import annotations

import re

KEY_PREFIXES = (
    "gen_ai.prompt", "gen_ai.completion", "gen_ai.input.messages", "gen_ai.output.messages",
    "gen_ai.system_instructions", "gen_ai.event.content", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
    "gen_ai.tool.definitions",
    "input.value", "output.value", "llm.input_messages", "llm.output_messages", "llm.prompt", "llm.completion",
)
# Only in span event attributes (where the GenAI event conventions put the message text).
EVENT_KEYS = ("content", "message", "tool_calls")


def pattern(event: bool = False) -> str:
    """The case-insensitive regular expression of content keys (event attributes: ``event=True``)."""
    # Dots as [.], never a backslash: the pattern travels inside SQL and OTTL string literals unescaped.
    parts = [_literal(p) for p in KEY_PREFIXES]
    if event:
        parts += [_literal(k) + "$" for k in EVENT_KEYS]
    return "(?i)^(" + "|".join(parts) + ")"


def _literal(key: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.]+", key):
        raise ValueError(f"content key {key!r}: only letters, digits, _ and . are supported")
    return key.replace(".", "[.]")


def is_content(key: str, event: bool = False) -> bool:
    return re.match(pattern(event), key) is not None

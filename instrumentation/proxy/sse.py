"""Reading OpenAI-compatible responses as they pass through: SSE events and what they carry.

The proxy forwards the upstream bytes untouched and feeds a copy to a :class:`StreamInspector`,
which splits the byte stream into server-sent events (any chunking, any line ending), decodes
each ``data:`` payload and reports how many of the events just fed carried output tokens. Along
the way it keeps what the span needs: model, response id, finish reasons, ``usage`` (present when
the client asked for it with ``stream_options.include_usage``), an in-stream ``error`` object, and
the first sign that the stream is not well-formed SSE.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Fields a server-sent event line may carry (WHATWG HTML, "event stream interpretation").
SSE_FIELDS = frozenset({b"data", b"event", b"id", b"retry"})
DONE = b"[DONE]"
# An event this large is not a token chunk: stop reading the stream (memory stays bounded), keep relaying.
MAX_EVENT_BYTES = 1024 * 1024
_decode = json.JSONDecoder().decode
# A chunk re-written without its usage (when it cannot be cut out): compact, UTF-8 as is, as
# vLLM's and SGLang's own chunks are.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
# Delta keys that mean "this chunk carries generated output" (content, reasoning, tool calls).
TOKEN_DELTA_KEYS = ("content", "reasoning_content", "reasoning", "tool_calls", "refusal")


@dataclass
class ResponseFacts:
    """What the proxy learned from the response body, for the span and the metrics."""

    model: str | None = None
    response_id: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens, part of output_tokens
    # An ``{"error": {...}}`` object sent by the upstream (in-stream or as the JSON body).
    upstream_error: str | None = None
    # Why the body is not what the protocol promises (malformed SSE, not JSON, no [DONE] ...).
    malformed: str | None = None
    # Token counting: True once a chunk carried the engine's running completion_tokens count.
    counted_per_chunk: bool = False
    tokens_counted: int = 0  # the last running count seen

    def read_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.input_tokens = _int_or(usage.get("prompt_tokens"), self.input_tokens)
        self.output_tokens = _int_or(usage.get("completion_tokens"), self.output_tokens)
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            self.cached_input_tokens = _int_or(details.get("cached_tokens"), self.cached_input_tokens)
        output_details = usage.get("completion_tokens_details")
        if isinstance(output_details, dict):
            self.reasoning_tokens = _int_or(output_details.get("reasoning_tokens"), self.reasoning_tokens)

    def read_payload(self, payload: dict[str, Any]) -> int:
        """Take what a chunk or a whole response says; return how many output tokens it carried.

        Exact where the engine counts per chunk (``usage.completion_tokens`` on every chunk: vLLM's
        and SGLang's ``stream_options.continuous_usage_stats``): the difference to the previous
        chunk's count. Otherwise one per choice that carries output, a lower bound: an engine holds
        back tokens that do not end a character and sends them with the next text.
        """
        error = payload.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            self.upstream_error = str(message or error)[:500]
        if self.model is None and isinstance(payload.get("model"), str):
            self.model = payload["model"]
        if self.response_id is None and isinstance(payload.get("id"), str):
            self.response_id = payload["id"]
        choices = payload.get("choices")
        running_count = None
        if "usage" in payload:
            usage = payload["usage"]
            self.read_usage(usage)
            if isinstance(choices, list) and choices and isinstance(usage, dict):
                running_count = _int_or(usage.get("completion_tokens"), None)
        carried = 0
        if not isinstance(choices, list):
            return 0
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.finish_reasons.append(reason)
            delta = choice.get("delta")
            if isinstance(delta, dict):
                if any(delta.get(key) for key in TOKEN_DELTA_KEYS):
                    carried += 1
            elif choice.get("text") or isinstance(choice.get("message"), dict):
                carried += 1
        if running_count is not None:  # the engine counts: exact, text or not
            self.counted_per_chunk = True
            carried, self.tokens_counted = max(running_count - self.tokens_counted, 0), max(running_count,
                                                                                             self.tokens_counted)
        return carried


def _int_or(value: Any, default: int | None) -> int | None:
    """A token count as the upstream sent it, if it is one (a negative or non-integer count is ignored)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


class StreamInspector:
    """Incremental SSE reader: ``feed(bytes) -> number of output tokens in the events completed``.

    With ``drop_usage_chunk`` or ``strip_chunk_usage`` it also decides what the client gets (the
    filtering mode): whole events only (a partial one waits for its end), minus what the proxy
    asked the engine for and the client did not: the usage-only chunk (``choices: []``) with
    ``drop_usage_chunk``, the running ``usage`` on every other chunk (``continuous_usage_stats``)
    with ``strip_chunk_usage``. :meth:`take` returns the bytes to relay.
    """

    def __init__(self, drop_usage_chunk: bool = False, strip_chunk_usage: bool = False) -> None:
        self.facts = ResponseFacts()
        self.done = False  # saw ``data: [DONE]``
        self.gave_up = False  # an oversized event: the rest of the stream is relayed unread
        self.drop_usage_chunk = drop_usage_chunk
        self.strip_chunk_usage = strip_chunk_usage
        self.filtering = drop_usage_chunk or strip_chunk_usage
        self._buffer = b""
        self._out: list[bytes] = []
        self._drop = False
        self._replacement: bytes | None = None  # the event as relayed, when it differs from what came

    def take(self) -> bytes:
        """The bytes to relay now (filtering mode)."""
        out, self._out = b"".join(self._out), []
        return out

    def held(self) -> bytes:
        """Filtering mode, when the stream ends early: every byte not yet relayed, the partial event too."""
        return self.take() + (self._buffer if self.filtering else b"")

    @property
    def partial(self) -> bool:
        """True while an event has started but not ended (its blank line has not arrived)."""
        return bool(self._buffer.strip(b"\r\n"))

    def feed(self, data: bytes) -> int:
        if self.gave_up:
            if self.filtering:
                self._out.append(data)
            return 0
        buffer = self._buffer + data
        if b"\r" in buffer:
            # Normalize CRLF and lone CR to LF; a trailing CR may be the first half of a CRLF.
            keep_cr = buffer.endswith(b"\r")
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buffer = buffer[:-1] + b"\r"
        tokens = 0
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            self._drop, self._replacement = False, None
            tokens += self._event(buffer[start:end])
            if self.filtering and not self._drop:
                self._out.append(buffer[start:end + 2] if self._replacement is None else self._replacement)
            start = end + 2
        self._buffer = buffer[start:]
        if len(self._buffer) > MAX_EVENT_BYTES:
            self._malformed(f"an event over {MAX_EVENT_BYTES:,} bytes; the rest of the stream was not read")
            if self.filtering:
                self._out.append(self._buffer)
            self._buffer = b""
            self.gave_up = True
        return tokens

    def finish(self) -> None:
        """The body ended: note a cut-off event or a missing ``[DONE]`` as malformed (and, when
        filtering, hand on what is left of it as it came)."""
        if self.filtering and self._buffer:
            self._out.append(self._buffer)
        if self.partial and self.facts.malformed is None:
            self.facts.malformed = "stream ended inside an event (no blank line after it)"
        if not self.done and self.facts.malformed is None and self.facts.upstream_error is None:
            self.facts.malformed = "stream ended without data: [DONE]"

    def _event(self, block: bytes) -> int:
        if block.startswith(b"data: ") and b"\n" not in block:  # the usual shape: one data line
            return self._data(block[6:], rewritable=True)
        data_lines: list[bytes] = []
        for line in block.lstrip(b"\n").split(b"\n"):
            if not line or line.startswith(b":"):  # blank or comment (keep-alive)
                continue
            name, colon, value = line.partition(b":")
            if not colon or name not in SSE_FIELDS:
                self._malformed(f"not an SSE field line: {line[:60]!r}")
                continue
            if name == b"data":
                data_lines.append(value[1:] if value.startswith(b" ") else value)
        if not data_lines:
            return 0
        return self._data(b"\n".join(data_lines))

    def _data(self, data: bytes, rewritable: bool = False) -> int:
        if data.strip() == DONE:
            self.done = True
            return 0
        try:
            payload = _decode(data.decode())  # str in: skips json.loads' encoding sniffing
        except ValueError:  # also UnicodeDecodeError
            self._malformed(f"event data is not JSON: {data[:60]!r}")
            return 0
        if not isinstance(payload, dict):
            self._malformed(f"event data is not a JSON object: {data[:60]!r}")
            return 0
        carried = self.facts.read_payload(payload)
        if self.filtering and "usage" in payload:
            if payload.get("choices") == []:
                self._drop = self.drop_usage_chunk
            elif self.strip_chunk_usage and rewritable:  # (an event of several lines goes as it came)
                self._replacement = b"data: " + _without_usage(data, payload) + b"\n\n"
        return carried

    def _malformed(self, why: str) -> None:
        if self.facts.malformed is None:
            self.facts.malformed = why


def _without_usage(data: bytes, payload: dict[str, Any]) -> bytes:
    """The chunk's JSON text without its top-level ``usage``: the engine's own bytes with that member
    cut out when it is the last one (vLLM's and SGLang's field order), else ``payload`` re-encoded.

    The cut is checked, not assumed: what follows ``,"usage":`` must decode to the usage read from
    this very chunk and be closed by the chunk's final brace, so it is the top-level member. About
    a fifth of the cost of re-encoding the chunk, and byte for byte what the engine sent otherwise.
    """
    usage = payload.pop("usage")
    at = data.rfind(b',"usage":')
    if at > 0 and data.endswith(b"}"):
        try:
            if _decode(data[at + 9:-1].decode()) == usage:
                return data[:at] + b"}"
        except ValueError:
            pass
    return _encode(payload).encode()


def inspect_json_body(body: bytes) -> ResponseFacts:
    """Facts from a non-streaming response body (a chat.completion or text_completion object)."""
    facts = ResponseFacts()
    try:
        payload = json.loads(body)
    except ValueError:
        facts.malformed = f"response body is not JSON: {body[:60]!r}"
        return facts
    if not isinstance(payload, dict):
        facts.malformed = "response body is not a JSON object"
        return facts
    facts.read_payload(payload)
    return facts

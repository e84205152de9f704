"""Decode and check one OTLP trace export request; hand back protobuf bytes for ClickHouse.

The receiver never turns spans into Python rows: ClickHouse parses the protobuf itself (see
:mod:`infersight.pipelines.receiver.ingest_sql`). Python only does what must happen before the
acknowledgement, with upb (C) doing the parsing:

- reject a body that is not OTLP (protobuf or OTLP/JSON) with the parser's reason;
- reject, per span, trace or span ids of the wrong length or all zero (the rest of the request is kept);
- cut attribute values longer than the limit (the token timeline attribute is exempt: the token
  materialized view needs it whole), counting each cut.

When nothing had to change, the original bytes are forwarded untouched (no re-serialization).
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import math
from dataclasses import dataclass

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from infersight import attributes as attr

ZERO_TRACE_ID = bytes(16)
ZERO_SPAN_ID = bytes(8)
# Attributes that must never be cut: the token materialized view parses the whole JSON array.
UNTRUNCATED_KEYS = frozenset({attr.TOKEN_OFFSETS_US})


class BadPayload(ValueError):
    """The body is not a valid OTLP trace export request; the message says why."""


@dataclass(frozen=True)
class Decoded:
    """A checked request: protobuf bytes to store and what the checks found."""

    payload: bytes  # ExportTraceServiceRequest, protobuf encoding, invalid spans removed
    spans: int  # spans kept
    invalid_ids: int  # spans dropped for an invalid trace or span id
    truncated: int  # attribute values cut to the limit


def decode_protobuf(body: bytes, max_attribute_length: int) -> Decoded:
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise BadPayload(f"malformed OTLP protobuf: {exc}") from None
    return _check(request, body, max_attribute_length)


def decode_json(body: bytes, max_attribute_length: int) -> Decoded:
    """OTLP/JSON: hex trace and span ids, lowerCamelCase field names, unknown fields ignored."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadPayload(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise BadPayload("malformed JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise BadPayload(f"OTLP/JSON body must be an object, got {type(document).__name__}")
    try:
        _hex_ids_to_base64(document)
        request = json_format.ParseDict(document, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, AttributeError, ValueError) as exc:
        raise BadPayload(f"not an OTLP trace export request: {str(exc)[:300]}") from None
    except RecursionError:
        raise BadPayload("not an OTLP trace export request: nested too deeply") from None
    return _check(request, None, max_attribute_length)


def canonical(payload: bytes) -> bytes:
    """The request re-encoded in the form ClickHouse always takes, storing the same text.

    - Without unknown fields: upb keeps a field whose wire type does not match its number as an
      unknown field; ClickHouse's stricter parser refuses the whole message (code 436).
    - Every array and map attribute value (span, resource, event, link) replaced by its text,
      :func:`render_any_value`: the insert SQL renders only one level and refuses nested arrays and
      maps (see ingest_sql). A string attribute is stored as it is, so the stored text is the same.

    Re-encoding costs a few us per span, so it is done only off the hot path: before a batch is
    spooled (acknowledged data must replay) and when ClickHouse has refused a batch once.
    """
    request = ExportTraceServiceRequest.FromString(payload)
    request.DiscardUnknownFields()
    for resource_spans in request.resource_spans:
        _render_containers(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                _render_containers(span.attributes)
                for event in span.events:
                    _render_containers(event.attributes)
                for link in span.links:
                    _render_containers(link.attributes)
    return request.SerializeToString()


def _render_containers(attributes) -> None:
    for item in attributes:
        value = item.value
        if value.WhichOneof("value") in ("array_value", "kvlist_value"):
            value.string_value = render_any_value(value)


def response_bytes(rejected: int, message: str = "", as_json: bool = False) -> bytes:
    """An ExportTraceServiceResponse, with partial_success when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if as_json:
        return json_format.MessageToJson(response, indent=None).encode()
    return response.SerializeToString()


def _check(request: ExportTraceServiceRequest, body: bytes | None, max_length: int) -> Decoded:
    kept = invalid = truncated = 0
    changed = body is None
    check_sizes = body is None or len(body) > max_length  # no value can exceed the limit otherwise
    # Which spans are longer than the limit on the wire: a value over the limit makes its span longer
    # still. From the body's span lengths (one shallow C parse) instead of a ByteSize() per span, which
    # encodes the span again: that was ~40% of this check's CPU (benchmarks/pipeline_profile.py --receiver).
    long_spans = _long_spans(body, max_length) if check_sizes and body is not None else None
    for resource_index, resource_spans in enumerate(request.resource_spans):
        for scope_index, scope_spans in enumerate(resource_spans.scope_spans):
            spans = scope_spans.spans
            bad = []
            long_here = None if long_spans is None else long_spans.get((resource_index, scope_index), ())
            for index, span in enumerate(spans):
                trace_id, span_id = span.trace_id, span.span_id
                if (len(trace_id) != 16 or len(span_id) != 8 or trace_id == ZERO_TRACE_ID
                        or span_id == ZERO_SPAN_ID or len(span.parent_span_id) not in (0, 8)):
                    bad.append(index)
                    continue
                # A value longer than the limit makes its span at least that long (cheap C check first).
                if (index in long_here) if long_here is not None else (check_sizes and span.ByteSize() > max_length):
                    cut = _truncate_span(span, max_length)
                    if cut:
                        truncated += cut
                        changed = True
            for index in reversed(bad):
                del spans[index]
            if bad:
                changed = True
            invalid += len(bad)
            kept += len(spans)
    payload = request.SerializeToString() if changed else body
    return Decoded(payload=payload, spans=kept, invalid_ids=invalid, truncated=truncated)


def _long_spans(body: bytes, max_length: int) -> dict[tuple[int, int], set[int]] | None:
    """``{(resource index, scope index): {span index, ...}}`` of the spans whose encoding in ``body`` is
    longer than ``max_length`` (usually empty), or None if the body cannot be read that way."""
    try:
        probe = _SpanLengths.FromString(body)
    except DecodeError:
        return None  # the full parse accepted it: fall back to measuring each span
    found: dict[tuple[int, int], set[int]] = {}
    for resource_index, resource_spans in enumerate(probe.resource_spans):
        for scope_index, scope_spans in enumerate(resource_spans.scope_spans):
            spans = scope_spans.spans  # each span's bytes as they are in the body
            if spans and max(map(len, spans)) > max_length:
                found[(resource_index, scope_index)] = {i for i, raw in enumerate(spans) if len(raw) > max_length}
    return found


def _span_lengths_message():
    """A message that reads an export request's spans as raw bytes (same field numbers: ``resource_spans``
    1, ``scope_spans`` 2, ``spans`` 2; everything else is kept unparsed), so their lengths cost one C parse."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="infersight/span_lengths.proto", package="infersight.probe",
                                               syntax="proto3")
    for name, child, number, kind in (("Scope", "spans", 2, field.TYPE_BYTES),
                                      ("Resource", "scope_spans", 2, field.TYPE_MESSAGE),
                                      ("Request", "resource_spans", 1, field.TYPE_MESSAGE)):
        message = proto.message_type.add(name=name)
        message.field.add(name=child, number=number, type=kind, label=field.LABEL_REPEATED,
                          type_name={"Resource": ".infersight.probe.Scope",
                                     "Request": ".infersight.probe.Resource"}.get(name))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("infersight.probe.Request"))


_SpanLengths = _span_lengths_message()


def _truncate_span(span, max_length: int) -> int:
    cut = _truncate_attributes(span.attributes, max_length)
    for event in span.events:
        cut += _truncate_attributes(event.attributes, max_length)
    for link in span.links:
        cut += _truncate_attributes(link.attributes, max_length)
    return cut


def _truncate_attributes(attributes, max_length: int) -> int:
    cut = 0
    for item in attributes:
        if item.key in UNTRUNCATED_KEYS:
            continue
        value = item.value
        kind = value.WhichOneof("value")
        if kind == "string_value":
            if len(value.string_value) > max_length:
                value.string_value = value.string_value[:max_length]
                cut += 1
        elif kind in ("array_value", "kvlist_value", "bytes_value") and value.ByteSize() > max_length:
            # Stored as text anyway (JSON or base64): render, cut, and store the cut text.
            text = render_any_value(value)
            if len(text) > max_length:
                value.string_value = text[:max_length]
                cut += 1
    return cut


def render_any_value(value) -> str:
    """An AnyValue as the OTel Collector's exporter writes it: pdata's ``Value.AsString()``.

    As in opentelemetry-collector pdata/pcommon/value.go (AsString, float64AsString,
    marshalJSONNoHTMLEscape; map.go and slice.go AsRaw): strings as they are, integers in decimal,
    booleans true/false, floats as Go's encoding/json writes them (shortest form, exponent only below
    1e-6 or from 1e21: ``1e+21``, ``1e-7``; ``NaN``, ``Infinity``, ``-Infinity``), bytes as base64,
    arrays and maps as JSON at any depth: map keys sorted by their bytes, a repeated key keeps its
    last value, no HTML escaping, an empty value and an empty byte string inside are ``null``, and
    an array or map holding a NaN or an infinity is ``""`` (Go's encoder fails on them).
    """
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return str(value.int_value)
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "double_value":
        return go_float(value.double_value)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    if kind in ("array_value", "kvlist_value"):
        try:
            return _json(value)
        except _NotJson:
            return ""
    return ""


class _NotJson(ValueError):
    """A value Go's encoding/json refuses (NaN, infinities)."""


def go_float(number: float) -> str:
    """``float64AsString`` of pdata (the ES6 number formatting of Go's encoding/json)."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    digits = decimal.Decimal(repr(number)).normalize()
    magnitude = abs(number)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        sign, figures, exponent = digits.as_tuple()
        exponent += len(figures) - 1
        mantissa = str(figures[0]) + ("." + "".join(map(str, figures[1:])) if len(figures) > 1 else "")
        return f"{'-' if sign else ''}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}".replace("e-0", "e-")
    return format(digits, "f")


def _json(value) -> str:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return "[" + ",".join(_json(v) for v in value.array_value.values) + "]"
    if kind == "kvlist_value":
        pairs = {kv.key: kv.value for kv in value.kvlist_value.values}
        return "{" + ",".join(f"{_json_string(k)}:{_json(pairs[k])}" for k in sorted(pairs, key=str.encode)) + "}"
    if kind == "string_value":
        return _json_string(value.string_value)
    if kind == "bytes_value":
        # AsRaw() copies the bytes into a nil slice: an empty one stays nil, which JSON writes as null.
        return _json_string(base64.b64encode(value.bytes_value).decode()) if value.bytes_value else "null"
    if kind is None:
        return "null"
    if kind == "double_value" and not math.isfinite(value.double_value):
        raise _NotJson(value.double_value)
    return render_any_value(value)


def _json_string(text: str) -> str:
    # Go escapes U+2028/U+2029 even without HTML escaping; json.dumps leaves them.
    return json.dumps(text, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _hex_ids_to_base64(document: dict) -> None:
    """OTLP/JSON writes ids as hex; protobuf's JSON mapping wants base64. Bad hex becomes an empty id,
    which the per-span check then rejects (and counts) without failing the whole request."""
    for resource_spans in _list(document, "resourceSpans", "resource_spans"):
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _list(scope_spans, "spans"):
                _convert_ids(span, ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"))
                for link in _list(span, "links"):
                    _convert_ids(link, ("traceId", "trace_id", "spanId", "span_id"))


def _list(obj, *keys) -> list:
    if not isinstance(obj, dict):
        raise BadPayload(f"expected an object, got {type(obj).__name__}")
    for key in keys:
        if key in obj:
            value = obj[key]
            if not isinstance(value, list):
                raise BadPayload(f"field {key!r} must be an array, got {type(value).__name__}")
            return value
    return []


def _convert_ids(obj: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        value = obj.get(key)
        if value is None:
            continue
        try:
            raw = bytes.fromhex(value) if isinstance(value, str) else b"\x00"
        except ValueError:
            raw = b"\x00"  # invalid id: rejected per span later
        obj[key] = binascii.b2a_base64(raw, newline=False).decode()

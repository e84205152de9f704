"""OTLP decoding and checks (no ClickHouse): protobuf and JSON, per-span id rejection, truncation."""

from __future__ import annotations

import json

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from infersight.pipelines.receiver import otlp
from infersight.pipelines.receiver.ingest_sql import frame, unframe
from tests.pipelines.receiver_payloads import any_value, json_request, request, span_ids


def test_valid_protobuf_is_forwarded_untouched():
    body = request(spans=5, attributes={"llm.pool": "stable"}).SerializeToString()
    decoded = otlp.decode_protobuf(body, 8192)
    assert decoded.payload is body  # no re-serialization on the hot path
    assert (decoded.spans, decoded.invalid_ids, decoded.truncated) == (5, 0, 0)


@pytest.mark.parametrize("body", [b"\x0a\xff\xff\xff", b"\xff" * 10, b"\x0a\x05abc"])
def test_malformed_protobuf_says_why(body):
    with pytest.raises(otlp.BadPayload, match="malformed OTLP protobuf"):
        otlp.decode_protobuf(body, 8192)


def test_invalid_ids_are_rejected_per_span_and_the_rest_kept():
    req = request(spans=6)
    spans = req.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = bytes(16)  # all zero
    spans[1].span_id = b"\x01\x02"  # wrong length
    spans[2].parent_span_id = b"\x01"  # wrong length
    keep = {spans[i].span_id.hex() for i in (3, 4, 5)}
    decoded = otlp.decode_protobuf(req.SerializeToString(), 8192)
    assert (decoded.spans, decoded.invalid_ids) == (3, 3)
    assert span_ids(ExportTraceServiceRequest.FromString(decoded.payload)) == keep


def test_long_strings_are_cut_and_counted_but_the_token_timeline_is_not():
    long = "x" * 500
    req = request(spans=2, attributes={"llm.note": long, "llm.short": "ok", "tags": ["y" * 400, "z"]}, tokens=200)
    decoded = otlp.decode_protobuf(req.SerializeToString(), 100)
    assert decoded.truncated == 4  # two spans x (llm.note, tags)
    out = ExportTraceServiceRequest.FromString(decoded.payload)
    attrs = {kv.key: kv.value for kv in out.resource_spans[0].scope_spans[0].spans[0].attributes}
    assert attrs["llm.note"].string_value == "x" * 100
    assert attrs["llm.short"].string_value == "ok"
    assert attrs["tags"].string_value == ('["' + "y" * 400)[:100]  # rendered as JSON text, then cut
    assert len(attrs["llm.token.offsets_us"].array_value.values) == 200


def test_only_the_long_spans_are_cut_wherever_they_are_in_the_request():
    """The spans over the limit are found from their lengths in the body, by resource, scope and index."""
    req = ExportTraceServiceRequest()
    for resource in range(2):
        resource_spans = req.resource_spans.add()
        for scope in range(2):
            part = request(spans=4, attributes={"llm.pool": f"p{resource}{scope}"})
            resource_spans.scope_spans.add().CopyFrom(part.resource_spans[0].scope_spans[0])
    spans = req.resource_spans[1].scope_spans[1].spans
    spans[2].attributes.add(key="llm.note").value.string_value = "n" * 500
    req.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="llm.ok").value.string_value = "s" * 90
    decoded = otlp.decode_protobuf(req.SerializeToString(), 100)
    assert (decoded.spans, decoded.truncated) == (16, 1)
    out = ExportTraceServiceRequest.FromString(decoded.payload)
    notes = [kv.value.string_value for rs in out.resource_spans for ss in rs.scope_spans for span in ss.spans
             for kv in span.attributes if kv.key in ("llm.note", "llm.ok")]
    assert notes == ["s" * 90, "n" * 100]


def test_event_attributes_are_truncated_too():
    req = request(spans=1)
    event = req.resource_spans[0].scope_spans[0].spans[0].events.add(name="e", time_unix_nano=1)
    event.attributes.add(key="detail").value.string_value = "d" * 300
    decoded = otlp.decode_protobuf(req.SerializeToString(), 64)
    assert decoded.truncated == 1


def test_json_with_hex_ids_decodes_like_protobuf():
    ids = ["0102030405060708", "1112131415161718"]
    decoded = otlp.decode_json(json.dumps(json_request(ids)).encode(), 8192)
    assert decoded.spans == 2 and decoded.invalid_ids == 0
    out = ExportTraceServiceRequest.FromString(decoded.payload)
    span = out.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == "5b8efff798038103d269b633813fc60c"
    assert span_ids(out) == set(ids)
    assert span.status.code == 2 and span.kind == 2
    assert {kv.key for kv in span.attributes} >= {"gen_ai.request.model", "llm.token.offsets_us"}


def test_json_bad_hex_id_rejects_only_that_span():
    body = json_request(["0102030405060708", "not-hex!", "01020304"])
    decoded = otlp.decode_json(json.dumps(body).encode(), 8192)
    assert (decoded.spans, decoded.invalid_ids) == (1, 2)


@pytest.mark.parametrize("body, reason", [
    (b"{not json", "malformed JSON"),
    (b"[1, 2]", "must be an object"),
    (b'{"resourceSpans": 5}', "must be an array"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}', "not an OTLP"),
    (b"\xff\xfe", "malformed JSON"),
])
def test_malformed_json_says_why(body, reason):
    with pytest.raises(otlp.BadPayload, match=reason):
        otlp.decode_json(body, 8192)


def test_unknown_json_fields_are_ignored():
    body = json_request(["0102030405060708"])
    body["resourceSpans"][0]["somethingNew"] = {"x": 1}
    assert otlp.decode_json(json.dumps(body).encode(), 8192).spans == 1


def test_partial_success_response():
    response = ExportTraceServiceResponse.FromString(otlp.response_bytes(3, "3 spans with an invalid id"))
    assert response.partial_success.rejected_spans == 3
    assert json.loads(otlp.response_bytes(2, "x", as_json=True))["partialSuccess"]["rejectedSpans"] == "2"
    assert otlp.response_bytes(0) == b""


# Bytes: pdata writes base64, unquoted.
@pytest.mark.parametrize("value, text", [
    ("plain", "plain"), (7, "7"), (True, "true"), (2.5, "2.5"), ([1, 2, 3], "[1,2,3]"),
    (["a", 1, False], '["a",1,false]'), ({"k": "v", "n": 2}, '{"k":"v","n":2}'), (b"\x00\x01", "AAE="),
])
def test_render_any_value_matches_the_collectors_text(value, text):
    assert otlp.render_any_value(any_value(value)) == text


def test_frame_round_trip():
    payloads = [b"", b"a", b"b" * 300, b"c" * 70000]
    assert unframe(frame(payloads)) == payloads

"""Attribute values stored as the OTel Collector's exporter stores them: pdata's ``Value.AsString()``.

The expected texts follow opentelemetry-collector pdata/pcommon (value.go: AsString, float64AsString,
marshalJSONNoHTMLEscape; map.go, slice.go, generated_byteslice.go: AsRaw) and Go's encoding/json:
map keys sorted by their bytes, the last of a repeated key kept, no HTML escaping, control characters
as lower-case ``\\u00xx``, an empty value or empty bytes inside a container ``null``, a container
holding NaN or an infinity ``""`` (the encoder fails), NaN and infinities alone ``NaN``/``Infinity``.

The receiver renders one level of arrays and maps in ClickHouse SQL (ingest_sql.py); a nested array
or map makes ClickHouse refuse the batch before writing anything, and the writer inserts it again with
every array and map rendered in Python (otlp.render_any_value, through otlp.canonical). Both paths are
held to the same texts here, except for the few differences ingest_sql.py documents (PYTHON_ONLY).
"""

from __future__ import annotations

import concurrent.futures
import urllib.request

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2

from infersight.pipelines.receiver import ingest_sql
from infersight.pipelines.receiver.otlp import canonical, go_float, render_any_value
from infersight.pipelines.receiver.sink import ClickHouseSink, InsertFailed
from infersight.pipelines.schema import ddl
from infersight.signals.pipeline import REENCODED_BATCHES
from tests.pipelines.receiver_payloads import any_value, metric, migrate, post, request, start_receiver

TABLES = ddl.DEFAULT_TABLES  # the schema's table names

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
NAN, INF = float("nan"), float("inf")

# (value, what pdata's AsString() returns): written by the insert SQL itself.
CASES = {
    "str": ("plain / text \"quoted\" é", "plain / text \"quoted\" é"),
    "str_control": ("a\x1fb\n", "a\x1fb\n"),
    "int": (-42, "-42"),
    "bool": (True, "true"),
    "float": (0.1, "0.1"),
    "float_whole": (100.0, "100"),
    "float_big": (1e21, "1e+21"),
    "float_below_cutoff": (1e20, "100000000000000000000"),
    "float_tiny": (1e-7, "1e-7"),
    "float_small": (0.000001, "0.000001"),
    "float_huge": (1.5e300, "1.5e+300"),
    "minus_zero_in_array": ([-0.0, 0.5], "[-0,0.5]"),
    "bytes": (b"\x00\x01\xff", "AAH/"),
    "bytes_empty": (b"", ""),
    "ints": ([1, 2, 3], "[1,2,3]"),
    "strings": (["stop", "len/gth"], '["stop","len/gth"]'),
    "mixed": ([1, "a", True, 2.5, 1e21], '[1,"a",true,2.5,1e+21]'),
    "map_sorted": ({"zeta": 1, "alpha": 2.5, "m": "a/b"}, '{"alpha":2.5,"m":"a/b","zeta":1}'),
    "array_with_null": ([1, None], "[1,null]"),
    "array_empty": ([], "[]"),
    "map_empty": ({}, "{}"),
    "html_and_separators": (["<a href=\"x\">&y</a>", "\u2028\u2029", "\b\f\t"],
                            '["<a href=\\"x\\">&y</a>","\\u2028\\u2029","\\b\\f\\t"]'),
}
# Nested arrays and maps, left to Python: the batch is refused once and stored re-encoded.
PYTHON_CASES = {
    "nested_array": ([[1, 2], [3]], "[[1,2],[3]]"),
    "nested_map": ({"b": {"y": 1, "x": "v"}, "a": [True, None]}, '{"a":[true,null],"b":{"x":"v","y":1}}'),
    "array_of_maps": ([{"instance": "10.0.0.1:8000", "score": 0.75}], '[{"instance":"10.0.0.1:8000","score":0.75}]'),
    "depth_3_array": ([[[1], "a/b"], {"k": [False, 1e21]}], '[[[1],"a/b"],{"k":[false,1e+21]}]'),
    "depth_3_map": ({"z": {"y": {"x": [b"", 2.5e-10, {}]}}, "Z": [[]]},
                    '{"Z":[[]],"z":{"y":{"x":[null,2.5e-10,{}]}}}'),
    "nested_empty": ([[None], {"e": None}], '[[null],{"e":null}]'),
    "inf_deep_in_map": ({"a": [1, {"b": -INF}]}, ""),
}
# Exact in Python only (ingest_sql.py's known differences, left for the query analysis cost of checking for
# them in SQL): NaN and infinities, empty bytes inside an array, a repeated key inside a map (invalid OTLP),
# control characters 0x0B, 0x0E, 0x0F, 0x1A-0x1F inside an array or map (Go: lower-case \u00xx).
PYTHON_ONLY = {"nan": (NAN, "NaN"), "inf": (INF, "Infinity"), "minus_inf": (-INF, "-Infinity"),
               "nan_in_array": ([1.0, NAN], ""), "bytes_in_array": ([b"", b"\x01"], '[null,"AQ=="]'),
               "repeated_key": ([("k", 1), ("j", "x"), ("k", 2)], '{"j":"x","k":2}'),  # pairs: a map
               "control_in_array": (["a\x1fb", "\x0b"], '["a\\u001fb","\\u000b"]'),
               "control_in_key": ({"k\x1e": 1}, '{"k\\u001e":1}')}


def _any(value):
    """An AnyValue; None is an empty one (null in JSON), a list of pairs a map that may repeat keys."""
    out = common_pb2.AnyValue()
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        out.kvlist_value.SetInParent()
        for key, item in value:
            out.kvlist_value.values.add(key=key).value.CopyFrom(_any(item))
    elif isinstance(value, list):
        out.array_value.SetInParent()
        for item in value:
            out.array_value.values.append(_any(item))
    elif isinstance(value, dict):
        out.kvlist_value.SetInParent()
        for key, item in value.items():
            out.kvlist_value.values.add(key=key).value.CopyFrom(_any(item))
    elif value is not None:
        out.CopyFrom(any_value(value))
    return out


def test_go_float_formatting():
    assert [go_float(x) for x in (1e21, 1e-7, 1e20, 1e-6, 123456789.0, -0.0, 2.5e-10, INF, -INF, NAN)] == \
        ["1e+21", "1e-7", "100000000000000000000", "0.000001", "123456789", "-0", "2.5e-10",
         "Infinity", "-Infinity", "NaN"]


@pytest.mark.parametrize("name", [*CASES, *PYTHON_CASES, *PYTHON_ONLY])
def test_python_rendering_is_as_string(name):
    value, expected = {**CASES, **PYTHON_CASES, **PYTHON_ONLY}[name]
    assert render_any_value(_any(value)) == expected


def test_canonical_form_stores_containers_as_their_text():
    req = request(spans=1)
    span = req.resource_spans[0].scope_spans[0].spans[0]
    for name, (value, _) in PYTHON_CASES.items():
        span.attributes.add(key=name).value.CopyFrom(_any(value))
    span.attributes.add(key="n").value.int_value = 7
    again = ExportTraceServiceRequest.FromString(canonical(req.SerializeToString()))
    values = {kv.key: kv.value for kv in again.resource_spans[0].scope_spans[0].spans[0].attributes}
    assert {k: v.string_value for k, v in values.items() if k != "n"} == \
        {name: text for name, (_, text) in PYTHON_CASES.items()}
    assert all(v.WhichOneof("value") == "string_value" for k, v in values.items() if k != "n")
    assert values["n"].int_value == 7  # scalars stay as they are


def _everywhere(req, cases: dict) -> None:
    """``cases`` as span, resource, event and link attributes of the request's first span."""
    rs = req.resource_spans[0]
    span = rs.scope_spans[0].spans[0]
    event = span.events.add(name="e", time_unix_nano=span.start_time_unix_nano + 1)
    link = span.links.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    for name, (value, _) in cases.items():
        for attributes in (span.attributes, rs.resource.attributes, event.attributes, link.attributes):
            attributes.add(key=f"t.{name}").value.CopyFrom(_any(value))


def _send(handle, transport: str, body: bytes) -> None:
    if transport == "http":
        assert post(handle.http_url + "/v1/traces", body)[0] == 200
    else:
        with grpc.insecure_channel(handle.grpc_target) as channel:
            channel.unary_unary(EXPORT)(body, timeout=60)


def _reencoded(handle) -> float:
    with urllib.request.urlopen(handle.http_url + "/metrics", timeout=30) as resp:
        return metric(resp.read().decode(), REENCODED_BATCHES.name)


def _stored(clickhouse_server, database: str, service: str) -> list[dict]:
    """Span, resource, event and link attributes of the service's span, from the unmerged parts just written."""
    client = clickhouse_server.client(database, role="reader")
    try:
        [row] = client.query("SELECT SpanAttributes, ResourceAttributes, Events.Attributes[1], Links.Attributes[1] "
                             f"FROM {TABLES.traces} WHERE ServiceName = {{s:String}}",
                             parameters={"s": service}).result_rows
    finally:
        client.close()
    return [{k[2:]: v for k, v in attrs.items() if k.startswith("t.")} for attrs in row]


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_stored_text_is_as_string(clickhouse_server, clickhouse_database, tmp_path, transport):
    migrate(clickhouse_server, clickhouse_database)
    handle = start_receiver(clickhouse_server.dsn(clickhouse_database), tmp_path / "spool")
    try:
        plain = request(spans=1, service="plain")
        _everywhere(plain, CASES)
        _send(handle, transport, plain.SerializeToString())
        assert _reencoded(handle) == 0  # the SQL wrote it all
        nested = request(spans=1, service="nested")
        _everywhere(nested, {**CASES, **PYTHON_CASES})
        _send(handle, transport, nested.SerializeToString())
        reencoded = _reencoded(handle)
    finally:
        handle.stop()
    assert reencoded == 1
    expected = {name: text for name, (_, text) in CASES.items()}
    assert _stored(clickhouse_server, clickhouse_database, "plain") == [expected] * 4
    expected |= {name: text for name, (_, text) in PYTHON_CASES.items()}
    assert _stored(clickhouse_server, clickhouse_database, "nested") == [expected] * 4


def test_a_refused_batch_writes_nothing_before_it_is_stored_again(clickhouse_server, clickhouse_database):
    """The refusal comes while ClickHouse parses the body, before any row: a nested value in the last of
    many requests leaves the tables empty, so the re-encoded insert cannot store a span twice."""
    migrate(clickhouse_server, clickhouse_database)
    bodies = [request(spans=500, tokens=8 if n % 4 == 0 else 0).SerializeToString() for n in range(60)]
    last = request(spans=500)
    last.resource_spans[0].scope_spans[0].spans[-1].attributes.add(key="deep").value.CopyFrom(_any([[1]]))
    bodies.append(last.SerializeToString())
    sink = ClickHouseSink(clickhouse_server.dsn(clickhouse_database))
    try:
        with pytest.raises(InsertFailed) as refused:
            sink.insert(ingest_sql.frame(bodies), "atomic-test")
        assert refused.value.permanent
        client = clickhouse_server.client(clickhouse_database, role="reader")
        tables = (TABLES.traces, TABLES.trace_id_ts, TABLES.token_timelines)
        assert [client.query(f"SELECT count() FROM {t}").result_rows[0][0] for t in tables] == [0, 0, 0]
        sink.insert(ingest_sql.frame([canonical(b) for b in bodies]), "atomic-test.c")
        [(rows, ids, deep)] = client.query("SELECT count(), uniqExact(SpanId), "
                                           "countIf(SpanAttributes['deep'] = '[[1]]') "
                                           f"FROM {TABLES.traces}").result_rows
        client.close()
    finally:
        sink.close()
    assert (rows, ids, deep) == (61 * 500, 61 * 500, 1)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (numbers up to 15): tag, length, bytes."""
    return bytes([number << 3 | 2]) + ingest_sql.frame([payload])


def _with_deep_attribute(req, depth: int) -> bytes:
    """The one-span request's bytes with an attribute nested ``depth`` arrays deep, written by hand:
    the protobuf library itself refuses to build a message that deep."""
    value = b"\x18\x01"  # AnyValue{int_value: 1}
    for _ in range(depth):
        value = _field(5, _field(1, value))  # AnyValue{array_value: ArrayValue{values: [value]}}
    rs = req.resource_spans[0]
    span = rs.scope_spans[0].spans[0].SerializeToString() + _field(9, _field(1, b"t.deep") + _field(2, value))
    scope_spans = _field(1, rs.scope_spans[0].scope.SerializeToString()) + _field(2, span)
    return _field(1, _field(1, rs.resource.SerializeToString()) + _field(2, scope_spans))


def test_a_hostile_nesting_is_stored_or_refused_and_the_others_are_stored(clickhouse_server, clickhouse_database,
                                                                            tmp_path):
    """Deep nesting from a hostile client: 40 arrays deep is stored exactly; 200 is a clear 400 (upb's limit of
    100 message levels, two per array), and the spans of other clients batched with it are all stored."""
    migrate(clickhouse_server, clickhouse_database)
    handle = start_receiver(clickhouse_server.dsn(clickhouse_database), tmp_path / "spool", batch_seconds=1.0)
    deep, too_deep = request(spans=1, service="deep"), request(spans=1, service="too-deep")
    try:
        status, _, body = post(handle.http_url + "/v1/traces", _with_deep_attribute(too_deep, 200))
        assert status == 400 and b"malformed" in body
        with concurrent.futures.ThreadPoolExecutor(8) as pool:  # batched together with the deep one
            bodies = [_with_deep_attribute(deep, 40)] + [request(spans=20, service="plain").SerializeToString()
                                                         for _ in range(7)]
            answers = list(pool.map(lambda body: post(handle.http_url + "/v1/traces", body)[0], bodies))
        assert answers == [200] * 8
    finally:
        handle.stop()
    client = clickhouse_server.client(clickhouse_database, role="reader")
    rows = dict(client.query(f"SELECT ServiceName, count() FROM {TABLES.traces} GROUP BY ServiceName").result_rows)
    [(text,)] = client.query(f"SELECT SpanAttributes['t.deep'] FROM {TABLES.traces} "
                             "WHERE ServiceName = 'deep'").result_rows
    client.close()
    assert rows == {"deep": 1, "plain": 140}
    assert text == "[" * 40 + "1" + "]" * 40

"""Attribute values stored as the OTel Collector's exporter stores them: pdata's ``Value.AsString()``.

The expected texts are Go's (pdata/pcommon/value.go, float64AsString and encoding/json); the receiver
renders in ClickHouse SQL (ingest_sql.py) and, for cut values, in Python (otlp.render_any_value).
Both are held to the same expected text here.
"""

from __future__ import annotations

import pytest
from opentelemetry.proto.common.v1 import common_pb2

from infersight.pipelines.receiver.otlp import go_float, render_any_value
from tests.pipelines.receiver_payloads import any_value, migrate, post, request, start_receiver

# (value, what pdata's AsString() returns)
CASES = {
    "str": ("plain / text \"quoted\" é", "plain / text \"quoted\" é"),
    "int": (-42, "-42"),
    "bool": (True, "true"),
    "float": (0.1, "0.1"),
    "float_whole": (100.0, "100"),
    "float_big": (1e21, "1e+21"),
    "float_below_cutoff": (1e20, "100000000000000000000"),
    "float_tiny": (1e-7, "1e-7"),
    "float_small": (0.000001, "0.000001"),
    "float_huge": (1.5e300, "1.5e+300"),
    "bytes": (b"\x00\x01\xff", "AAH/"),
    "ints": ([1, 2, 3], "[1,2,3]"),
    "strings": (["stop", "len/gth"], '["stop","len/gth"]'),
    "mixed": ([1, "a", True, 2.5, 1e21], '[1,"a",true,2.5,1e+21]'),
    "map_sorted": ({"zeta": 1, "alpha": 2.5, "m": "a/b"}, '{"alpha":2.5,"m":"a/b","zeta":1}'),
    "array_with_null": ([1, None], "[1,null]"),
}
# Containers inside containers: rendered whole by the Python path (values cut to max_attribute_length).
# The SQL path unrolls one level only (deeper unrolling tripled the per-insert analysis cost), so
# there they still read as null: see the closing note.
NESTED = {
    "nested_array": ([[1, 2], [3]], "[[1,2],[3]]"),
    "nested_map": ({"b": {"y": 1, "x": "v"}, "a": [True, None]}, '{"a":[true,null],"b":{"x":"v","y":1}}'),
    "array_of_maps": ([{"instance": "10.0.0.1:8000", "score": 0.75}], '[{"instance":"10.0.0.1:8000","score":0.75}]'),
}


def test_go_float_formatting():
    assert [go_float(x) for x in (1e21, 1e-7, 1e20, 1e-6, 123456789.0, -0.0, 2.5e-10, float("inf"))] == \
        ["1e+21", "1e-7", "100000000000000000000", "0.000001", "123456789", "-0", "2.5e-10",
         "json: unsupported value: +Inf"]


@pytest.mark.parametrize("name", [*CASES, *NESTED])
def test_python_rendering_is_as_string(name):
    value, expected = {**CASES, **NESTED}[name]
    assert render_any_value(_any(value)) == expected


def _any(value):
    """An AnyValue; None is an empty one (null in JSON)."""
    out = common_pb2.AnyValue()
    if isinstance(value, list):
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


def test_stored_text_is_as_string(clickhouse_server, clickhouse_database, tmp_path):
    migrate(clickhouse_server, clickhouse_database)
    req = request(spans=1)
    span = req.resource_spans[0].scope_spans[0].spans[0]
    for name, (value, _) in CASES.items():
        span.attributes.add(key=f"t.{name}").value.CopyFrom(_any(value))
    handle = start_receiver(clickhouse_server.dsn(clickhouse_database), tmp_path / "spool")
    try:
        assert post(handle.http_url + "/v1/traces", req.SerializeToString())[0] == 200
    finally:
        handle.stop()
    client = clickhouse_server.client(clickhouse_database, role="reader")
    [(attrs,)] = client.query("SELECT SpanAttributes FROM otel_traces").result_rows
    client.close()
    stored = {k[2:]: v for k, v in attrs.items() if k.startswith("t.")}
    assert stored == {name: expected for name, (_, expected) in CASES.items()}

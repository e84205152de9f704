"""Span-to-row conversion done by ClickHouse: OTLP protobuf in, otel_traces rows out.

Turning spans into Python rows attribute by attribute runs at ~35-45k spans/s per core. Instead the
writer sends ClickHouse the OTLP request bytes as they arrived (length-delimited ``Protobuf``
format, one ``ExportTraceServiceRequest`` per message) with ``INSERT INTO otel_traces SELECT ...
FROM input(...)``; ClickHouse's C++ parser and vectorized functions flatten resource -> scope ->
span and render the attribute maps as the OTel Collector's exporter does (pdata ``AsString()``:
strings as they are, integers in decimal, booleans ``true``/``false``, arrays and maps as JSON).

``WIRE_PROTO`` is wire-compatible with ``opentelemetry/proto/trace/v1`` (same field numbers and wire
types) but shaped for ClickHouse:

- ``AnyValue``'s oneof members are declared ``repeated``: an absent member reads as an empty array,
  so the SQL can tell ``int_value = 0`` from "not an int" (ClickHouse has no presence for scalars);
- ``AnyValue`` is not recursive (ClickHouse cannot map recursive messages): arrays and maps are
  rendered one level deep here. An element that is itself an array or a map (depth 2 and more, rare)
  lands in ``ScalarValue``'s ``nested_array``/``nested_kvlist``, columns of an ``Enum8`` that no bytes
  convert to (not even an empty container's): ClickHouse refuses the batch while parsing it (code
  691), before any row is written (the whole body is one block: ``input_format_max_block_size_bytes``
  is 0 and a batch holds far fewer messages than ``max_insert_block_size``). The writer then inserts
  the batch again with every array and map value rendered to its text in Python
  (:func:`otlp.canonical`). The common case pays two empty array columns per element of an array or
  map value and no SQL (measured: ``benchmarks/pipeline_profile.py --against``);
- known differences from Go, left because checking for them costs every insert more query analysis
  (measured with ``benchmarks/pipeline_profile.py --against``: a ``transform`` mapping NaN alone
  ~20%, an empty-bytes test inside arrays ~7%): NaN and infinities are written ``nan``, ``inf``,
  ``-inf`` (pdata: ``NaN``, ``Infinity``, ``-Infinity``; inside an array or map Go's encoder fails and
  AsString() is ``""``); inside an array or map, empty bytes are written ``""`` (Go: ``null``), the
  control characters 0x0B, 0x0E, 0x0F, 0x1A-0x1F as upper-case ``\\u00XX`` (Go: lower-case) and a
  repeated key (invalid OTLP) twice (Go keeps the last). The Python renderer
  (:func:`otlp.render_any_value`) writes all of these as Go does;
- fields we do not store (dropped counts, flags, schema URLs) are left out and skipped.
"""

from __future__ import annotations

from infersight.pipelines import content_filter
from infersight.pipelines.schema import ddl

MESSAGE = "ExportTraceServiceRequest"

WIRE_PROTO = """
syntax = "proto3";
message ScalarValue {
  repeated string string_value = 1;
  repeated bool bool_value = 2 [packed = false];
  repeated int64 int_value = 3 [packed = false];
  repeated double double_value = 4 [packed = false];
  repeated bytes bytes_value = 7;
  // An array or a map inside an array or map (depth 2): its bytes, only to refuse it (see above).
  repeated bytes nested_array = 5;
  repeated bytes nested_kvlist = 6;
}
message ScalarArray { repeated ScalarValue values = 1; }
message ScalarKeyValue { string key = 1; ScalarValue value = 2; }
message ScalarKvList { repeated ScalarKeyValue values = 1; }
message AnyValue {
  repeated string string_value = 1;
  repeated bool bool_value = 2 [packed = false];
  repeated int64 int_value = 3 [packed = false];
  repeated double double_value = 4 [packed = false];
  repeated ScalarArray array_value = 5;
  repeated ScalarKvList kvlist_value = 6;
  repeated bytes bytes_value = 7;
}
message KeyValue { string key = 1; AnyValue value = 2; }
message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; }
message Link { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4; }
message Status { string message = 2; int32 code = 3; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; repeated Event events = 11; repeated Link links = 13; Status status = 15;
}
message Scope { string name = 1; string version = 2; }
message ScopeSpans { Scope scope = 1; repeated Span spans = 2; }
message Resource { repeated KeyValue attributes = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
"""

# The same shape as ClickHouse column types, for input('...') / file('...').
_SCALARS = ("string_value Array(String), bool_value Array(Bool), int_value Array(Int64), "
            "double_value Array(Float64)")
# Any element here (even an empty container's bytes) fails to convert to the Enum: the batch is refused while parsed.
_NESTED = "Array(Enum8('refused' = 1))"
_SCALAR = f"Tuple({_SCALARS}, bytes_value Array(String), nested_array {_NESTED}, nested_kvlist {_NESTED})"
_ANY = (f"Tuple({_SCALARS}, array_value Array(Tuple(values Array({_SCALAR}))), "
        f"kvlist_value Array(Tuple(values Array(Tuple(key String, value {_SCALAR})))), bytes_value Array(String))")
_ATTRIBUTES = f"Array(Tuple(key String, value {_ANY}))"
_SPAN = (f"Tuple(trace_id String, span_id String, trace_state String, parent_span_id String, name String, "
         f"kind Int32, start_time_unix_nano UInt64, end_time_unix_nano UInt64, attributes {_ATTRIBUTES}, "
         f"events Array(Tuple(time_unix_nano UInt64, name String, attributes {_ATTRIBUTES})), "
         f"links Array(Tuple(trace_id String, span_id String, trace_state String, attributes {_ATTRIBUTES})), "
         f"status Tuple(message String, code Int32))")
STRUCTURE = (f"resource_spans Array(Tuple(resource Tuple(attributes {_ATTRIBUTES}), "
             f"scope_spans Array(Tuple(scope Tuple(name String, version String), spans Array({_SPAN})))))")

SPAN_KINDS = "['Unspecified', 'Internal', 'Server', 'Client', 'Producer', 'Consumer']"
STATUS_CODES = "['Unset', 'Ok', 'Error']"


def settings(dedup_token: str | None = None, threads: int = 1) -> dict[str, str]:
    """Per-insert settings: the inline schema, the batch's deduplication token, and ``threads``:
    how many threads ClickHouse may use for the insert after parsing (``max_insert_threads``)."""
    values = {
        "format_schema_source": "string",
        "format_schema": WIRE_PROTO,
        "format_schema_message_name": MESSAGE,
        # Retried or replayed batches must not double the rows of the views either.
        "deduplicate_blocks_in_dependent_materialized_views": "1",
        # The views (trace lookup, token events, rollup) run side by side instead of one after another.
        "parallel_view_processing": "1",
        # Go's encoding/json (the Collector's AsString) leaves '/' alone; ClickHouse escapes it by default.
        "output_format_json_escape_forward_slashes": "0",
        # The plan optimizer's passes over the intake SELECT and its views cost 20-40 ms per insert
        # (0.64-0.90x the fixed cost of an insert without them) and find nothing to gain on a
        # projection of one INSERT's rows: the per-span cost stays within noise (issue 18).
        "query_plan_enable_optimizations": "0",
    }
    if threads > 1:
        # The Protobuf input is parsed by one thread; flattening, rendering, the views and the parts
        # after it are split over this many (measured: 2 threads at ~half the CPU each, issue 18).
        values["max_insert_threads"] = str(threads)
    if dedup_token:
        values["insert_deduplication_token"] = dedup_token
    return values


def insert_query(database: str, store_content: bool = False, source: str | None = None,
                 table: str = ddl.DEFAULT_TABLES.trace_intake) -> str:
    """``INSERT INTO db.<table> (...) SELECT ... FROM input(...) FORMAT Protobuf``: by default the intake,
    whose views fill the trace table and the token timelines (:func:`ddl.trace_intake`).

    ``source`` replaces ``input(...)`` (e.g. ``file(path, 'Protobuf', STRUCTURE)`` for in-process chdb).
    """
    source = source or f"input({_literal(STRUCTURE)})"
    columns = ", ".join(f"`{c}`" for c in ddl.EXPORTER_INSERT_COLUMNS)
    target = f"{ddl.identifier(database)}.{ddl.identifier(table)}"
    fmt = " FORMAT Protobuf" if source.startswith("input(") else ""
    return f"INSERT INTO {target} ({columns})\n{select(store_content, source)}{fmt}"


def select(store_content: bool, source: str) -> str:
    def attributes(expr: str, event: bool = False) -> str:
        return _attribute_map(expr, store_content, event)

    # Resource and scope are joined per (resource, scope) pair first and only then per span, so that
    # ClickHouse never copies a whole scope's span array once per span (that is quadratic); the
    # resource's attribute map is rendered there too, once per resource instead of once per span.
    flat = f"""(SELECT resource_map, scope, arrayJoin(spans) AS span FROM
  (SELECT {attributes('rs.resource.attributes')} AS resource_map, ss.scope AS scope, ss.spans AS spans FROM
    (SELECT rs, arrayJoin(rs.scope_spans) AS ss FROM
      (SELECT arrayJoin(resource_spans) AS rs FROM {source}))))"""
    return f"""SELECT
  fromUnixTimestamp64Nano(toInt64(span.start_time_unix_nano)) AS Timestamp,
  lower(hex(span.trace_id)) AS TraceId,
  lower(hex(span.span_id)) AS SpanId,
  lower(hex(span.parent_span_id)) AS ParentSpanId,
  span.trace_state AS TraceState,
  span.name AS SpanName,
  {SPAN_KINDS}[span.kind + 1] AS SpanKind,
  resource_map['service.name'] AS ServiceName,
  resource_map AS ResourceAttributes,
  scope.name AS ScopeName,
  scope.version AS ScopeVersion,
  {attributes('span.attributes')} AS SpanAttributes,
  if(span.end_time_unix_nano > span.start_time_unix_nano,
     span.end_time_unix_nano - span.start_time_unix_nano, 0) AS Duration,
  {STATUS_CODES}[span.status.code + 1] AS StatusCode,
  span.status.message AS StatusMessage,
  arrayMap(e -> fromUnixTimestamp64Nano(toInt64(e.time_unix_nano)), span.events) AS `Events.Timestamp`,
  arrayMap(e -> e.name, span.events) AS `Events.Name`,
  arrayMap(e -> {attributes('e.attributes', event=True)}, span.events) AS `Events.Attributes`,
  arrayMap(l -> lower(hex(l.trace_id)), span.links) AS `Links.TraceId`,
  arrayMap(l -> lower(hex(l.span_id)), span.links) AS `Links.SpanId`,
  arrayMap(l -> l.trace_state, span.links) AS `Links.TraceState`,
  arrayMap(l -> {attributes('l.attributes')}, span.links) AS `Links.Attributes`
FROM {flat}"""


def _attribute_map(expr: str, store_content: bool, event: bool = False) -> str:
    if not store_content:
        # Prompt and completion text is dropped here, in every attribute place (content_filter.py).
        # One regex rather than a startsWith per prefix: fewer nodes for ClickHouse to analyze per insert.
        expr = f"arrayFilter(a -> NOT match(a.key, {_literal(content_filter.pattern(event))}), {expr})"
    return f"mapFromArrays(arrayMap(a -> a.key, {expr}), arrayMap(a -> {_render('a.value')}, {expr}))"


def _render(v: str) -> str:
    """An AnyValue as text. Exactly one member is non-empty, so the branches never overlap."""
    return (f"multiIf(notEmpty({v}.string_value), {v}.string_value[1], "
            f"notEmpty({v}.int_value), toString({v}.int_value[1]), "
            f"notEmpty({v}.bool_value), if({v}.bool_value[1], 'true', 'false'), "
            f"notEmpty({v}.double_value), {_double(v + '.double_value[1]')}, "
            f"notEmpty({v}.array_value), {_render_array(v + '.array_value[1].values')}, "
            f"notEmpty({v}.kvlist_value), {_render_map(v + '.kvlist_value[1].values')}, "
            f"notEmpty({v}.bytes_value), base64Encode({v}.bytes_value[1]), '')")


def _render_array(values: str) -> str:
    # Integer arrays (the token timeline) take the fast path: ClickHouse prints Array(Int64) as JSON.
    ints = f"arrayFlatten(arrayMap(e -> e.int_value, {values}))"
    general = f"concat('[', arrayStringConcat(arrayMap(e -> {_scalar_json('e')}, {values}), ','), ']')"
    return f"if(length({ints}) = length({values}), toString({ints}), {general})"


def _render_map(pairs: str) -> str:
    # Go's encoding/json writes a map's keys sorted (byte order, as arraySort compares strings). A key
    # given twice (invalid OTLP) is written twice here; Go keeps its last value.
    return (f"concat('{{', arrayStringConcat(arrayMap(p -> concat({_json_string('p.key')}, ':', "
            f"{_scalar_json('p.value')}), arraySort(p -> p.key, {pairs})), ','), '}}')")


def _scalar_json(v: str) -> str:
    """An element of an array or map value as Go's encoding/json writes it (pdata's ``AsRaw()``)."""
    bytes_, double = f"{v}.bytes_value[1]", f"{v}.double_value[1]"
    return (f"multiIf(notEmpty({v}.string_value), {_json_string(v + '.string_value[1]')}, "
            f"notEmpty({v}.int_value), toString({v}.int_value[1]), "
            f"notEmpty({v}.bool_value), if({v}.bool_value[1], 'true', 'false'), "
            # Known difference: a NaN or an infinity here is written nan/inf; Go's encoder fails on them and
            # AsString() returns "" for the whole value. A check per element cost ~25% more query analysis.
            f"notEmpty({v}.double_value), {_double(double)}, "
            f"notEmpty({v}.bytes_value), toJSONString(base64Encode({bytes_})), 'null')")


def _json_string(s: str) -> str:
    # Known difference, kept for the analyzer's sake (each check adds to the cost of every insert): ClickHouse writes
    # the control characters 0x0B, 0x0E, 0x0F, 0x1A-0x1F as upper-case \u00XX, Go as lower-case.
    return f"toJSONString({s})"


def _double(x: str) -> str:
    """A float as Go's encoding/json writes it: ClickHouse's shortest form plus the exponent sign Go adds
    (1e21 -> 1e+21; negative exponents already match: 1e-7)."""
    return f"replaceRegexpOne(toString({x}), 'e([0-9])', 'e+\\\\1')"


def _literal(text: str) -> str:
    return ddl.literal(text)


def frame(payloads: list[bytes]) -> bytes:
    """Length-delimited messages: ClickHouse's ``Protobuf`` format reads one row per message."""
    parts = []
    for payload in payloads:
        parts.append(_varint(len(payload)))
        parts.append(payload)
    return b"".join(parts)


def unframe(data: bytes) -> list[bytes]:
    """The inverse of :func:`frame` (used to split a batch into its requests)."""
    out, pos = [], 0
    while pos < len(data):
        length, shift = 0, 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        out.append(data[pos:pos + length])
        pos += length
    return out


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)

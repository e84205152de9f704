"""vLLM's own spans (``--otlp-traces-endpoint``) fill the timing and token columns (schema version 6).

The spans here are made the way vLLM 0.32 makes them (vllm-project/vllm ``vllm/tracing/otel.py``
manual_instrument_otel, attributes from ``vllm/v1/engine/output_processor.py`` do_tracing): the OTel
SDK, a resource without ``service.name``, one SERVER span ``llm_request`` started at the arrival time,
latencies as float seconds, token counts as ints, sent over OTLP/gRPC to our real receiver, and read
back from the parts the inserts wrote (merges stopped). tests/engines/test_vllm_tracing.py checks the
same against a real vLLM.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from infersight import attributes as attr
from infersight.pipelines.schema import ddl, migrations
from infersight.pipelines.schema.ddl import SchemaOptions
from tests.pipelines.receiver_payloads import migrate, start_receiver
from tests.pipelines.span_rows import insert_spans, span_row

TABLES = ddl.DEFAULT_TABLES  # the schema's table names

COLUMNS = "TtftMs, QueueMs, TpotMs, InputTokens, OutputTokens, CachedInputTokens, IsRequest, Outcome"


def vllm_attributes(request_id: str, ttft: float, queue: float, decode: float, prompt: int, completion: int) -> dict:
    """do_tracing's attribute set, with its Python types (floats and ints, as the SDK sends them)."""
    prefill = ttft - queue - 0.0004
    return {
        attr.GEN_AI_LATENCY_TTFT_S: ttft, attr.GEN_AI_LATENCY_E2E_S: ttft + decode + 0.0002,
        attr.GEN_AI_LATENCY_QUEUE_S: queue, attr.GEN_AI_USAGE_PROMPT_TOKENS: prompt,
        attr.GEN_AI_USAGE_COMPLETION_TOKENS: completion, attr.GEN_AI_LATENCY_PREFILL_S: prefill,
        attr.GEN_AI_LATENCY_DECODE_S: decode, "gen_ai.latency.time_in_model_inference": prefill + decode,
        attr.GEN_AI_REQUEST_ID: request_id, attr.GEN_AI_REQUEST_MAX_TOKENS: completion,
        "gen_ai.request.top_p": 0.9, "gen_ai.request.temperature": 0.7, "gen_ai.request.n": 1,
    }


def send_like_vllm(grpc_target: str, spans: list[dict]) -> None:
    """Export ``spans`` as vLLM's tracer does: its resource, its exporter (gRPC, insecure), its span calls."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind

    resource = Resource.create({"vllm.instrumenting_module_name": "vllm.llm_engine", "vllm.process_id": "4242"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=grpc_target, insecure=True)))
    tracer = provider.get_tracer("vllm.tracing.otel")
    arrival = time.time_ns() - 2_000_000_000
    for attributes in spans:
        span = tracer.start_span(name=attr.VLLM_SPAN_NAME, start_time=arrival, kind=SpanKind.SERVER)
        span.set_attributes(attributes)
        span.end()
    assert provider.force_flush(30_000)
    provider.shutdown()


def stop_merges(client, database: str) -> None:
    client.command(f"SYSTEM STOP MERGES `{database}`.{TABLES.traces}")


def active_parts(client, database: str) -> int:
    return client.query("SELECT count() FROM system.parts WHERE database = {db:String} AND table = {t:String} "
                        "AND active", parameters={"db": database, "t": TABLES.traces}).result_rows[0][0]


def by_request_id(client, database: str) -> dict[str, tuple]:
    rows = client.query(f"SELECT SpanAttributes[{ddl.literal(attr.GEN_AI_REQUEST_ID)}], {COLUMNS} "
                        f"FROM `{database}`.{TABLES.traces}").result_rows
    return {row[0]: row[1:] for row in rows}


@pytest.fixture
def receiver(clickhouse_server, clickhouse_database, tmp_path):
    migrate(clickhouse_server, clickhouse_database)
    stop_merges(clickhouse_server.client(), clickhouse_database)
    handle = start_receiver(clickhouse_server.dsn(clickhouse_database), tmp_path / "spool")
    yield handle
    handle.stop()


def test_vllm_spans_fill_the_timing_and_token_columns(clickhouse_server, clickhouse_database, receiver):
    send_like_vllm(receiver.grpc_target, [
        vllm_attributes("chatcmpl-a", ttft=0.0123, queue=0.0015, decode=0.31, prompt=37, completion=32),
        # a queue time too small for decimal: stored as Go writes it, 7e-7
        vllm_attributes("chatcmpl-b", ttft=1.75, queue=7e-7, decode=0.0, prompt=512, completion=1),
    ])
    send_like_vllm(receiver.grpc_target, [
        vllm_attributes("cmpl-c", ttft=0.2, queue=0.05, decode=2.0, prompt=8, completion=201)])
    client = clickhouse_server.client()
    assert active_parts(client, clickhouse_database) == 2  # read from the parts as written
    rows = by_request_id(client, clickhouse_database)
    ttft, queue, tpot, prompt, completion, cached, is_request, outcome = rows["chatcmpl-a"]
    assert (ttft, queue, tpot) == (pytest.approx(12.3), pytest.approx(1.5), pytest.approx(310 / 31))
    assert (prompt, completion, cached) == (37, 32, 0)  # vLLM 0.32 puts no cached tokens on its span
    # An engine span is no request span (no llm.request.outcome): the per-minute rollup does not count
    # it twice when a gateway or the proxy traced the same request.
    assert (is_request, outcome) == (False, "")
    ttft, queue, tpot, prompt, completion, *_ = rows["chatcmpl-b"]
    assert (ttft, queue, prompt, completion) == (pytest.approx(1750.0), pytest.approx(7e-4), 512, 1)
    assert tpot is None  # one token: no time per output token (vLLM's histogram records 0 here)
    assert rows["cmpl-c"][:5] == (pytest.approx(200.0), pytest.approx(50.0), pytest.approx(10.0), 8, 201)
    queue_text, request_id = ddl.span_attr(attr.GEN_AI_LATENCY_QUEUE_S), ddl.span_attr(attr.GEN_AI_REQUEST_ID)
    stored = client.query(f"SELECT SpanName, SpanKind, ServiceName, {queue_text} "
                          f"FROM `{clickhouse_database}`.{TABLES.traces} WHERE {request_id} = 'chatcmpl-b'").result_rows
    assert stored == [("llm_request", "Server", "unknown_service:python", "7e-7")]


def test_our_names_win_and_the_genai_cache_name_is_read(clickhouse_server, clickhouse_database, receiver):
    both = vllm_attributes("both", ttft=0.5, queue=0.1, decode=1.0, prompt=10, completion=11) | {
        attr.TTFT_MS: 42.0, attr.QUEUE_MS: 3.0, attr.TPOT_MS: 7.5, attr.GEN_AI_USAGE_INPUT_TOKENS: 12,
        attr.GEN_AI_USAGE_OUTPUT_TOKENS: 13, attr.CACHED_INPUT_TOKENS: 4,
        attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 9}
    semconv = {attr.GEN_AI_REQUEST_ID: "semconv", attr.GEN_AI_USAGE_INPUT_TOKENS: 300,
               attr.GEN_AI_USAGE_OUTPUT_TOKENS: 20, attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 256}
    send_like_vllm(receiver.grpc_target, [both, semconv])
    rows = by_request_id(clickhouse_server.client(), clickhouse_database)
    assert rows["both"][:6] == (42.0, 3.0, 7.5, 12, 13, 4)
    assert rows["semconv"][:6] == (None, None, None, 300, 20, 256)


# Versions 1-5 defined these columns over our names only (what a database migrated before version 6 holds).
BEFORE_VERSION_6 = {
    "TtftMs": ("Nullable(Float64)", f"toFloat64OrNull({ddl.span_attr(attr.TTFT_MS)})"),
    "TpotMs": ("Nullable(Float64)", f"toFloat64OrNull({ddl.span_attr(attr.TPOT_MS)})"),
    "QueueMs": ("Nullable(Float64)", f"toFloat64OrNull({ddl.span_attr(attr.QUEUE_MS)})"),
    "InputTokens": ("UInt32", f"toUInt32OrZero({ddl.span_attr(attr.GEN_AI_USAGE_INPUT_TOKENS)})"),
    "OutputTokens": ("UInt32", f"toUInt32OrZero({ddl.span_attr(attr.GEN_AI_USAGE_OUTPUT_TOKENS)})"),
    "CachedInputTokens": ("UInt32", f"toUInt32OrZero({ddl.span_attr(attr.CACHED_INPUT_TOKENS)})"),
}


def vllm_row(request_id: str, trace: str) -> list:
    """A vLLM span as the OTel Collector's exporter would insert it (attribute values as text)."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return span_row(now, trace, trace[:16], attr.VLLM_SPAN_NAME, 900, service="vllm", attributes=vllm_attributes(
        request_id, ttft=0.25, queue=0.125, decode=0.5, prompt=64, completion=11))


def test_version_6_upgrades_a_database_that_holds_spans(clickhouse_server, clickhouse_database):
    client, db = clickhouse_server.client(), clickhouse_database
    opts = SchemaOptions(database=db)
    migrations.migrate(client, opts)
    client.command(f"ALTER TABLE {opts.table(TABLES.traces)} " + ", ".join(
        f"MODIFY COLUMN {name} {kind} MATERIALIZED {expr}" for name, (kind, expr) in BEFORE_VERSION_6.items()))
    client.command(f"DELETE FROM {opts.table(TABLES.migrations)} WHERE Version = 6")
    stop_merges(client, db)
    insert_spans(client, db, [vllm_row("before", "a" * 32)])
    assert by_request_id(client, db)["before"][:5] == (None, None, None, 0, 0)

    assert [m.version for m in migrations.migrate(client, opts)] == [6]
    insert_spans(client, db, [vllm_row("after", "b" * 32)])
    rows = by_request_id(client, db)
    assert rows["after"][:5] == (250.0, 125.0, 50.0, 64, 11)
    # Only the expression changed: no mutation ran, and the part stored before keeps its values.
    assert rows["before"][:5] == (None, None, None, 0, 0)
    assert client.query("SELECT count() FROM system.mutations WHERE database = {db:String} AND table = {t:String}",
                        parameters={"db": db, "t": TABLES.traces}).result_rows == [(0,)]
    # The optional rewrite the docstring names fills the old part too.
    client.command(f"SYSTEM START MERGES {opts.table(TABLES.traces)}")
    client.command(f"ALTER TABLE {opts.table(TABLES.traces)} MATERIALIZE COLUMN TtftMs", settings={"mutations_sync": 2})
    assert by_request_id(client, db)["before"][0] == 250.0
    # Running it again changes nothing.
    for statement in ddl.fallback_columns(opts):
        client.command(statement)
    assert by_request_id(client, db)["after"][:5] == (250.0, 125.0, 50.0, 64, 11)

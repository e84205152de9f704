"""A kept timeline is stored once (schema version 7), through the real receiver and ClickHouse.

Our tracer sends a timeline with its summary (longest gap, when it started): the intake writes the span
into otel_traces without the offsets and the timeline into llm_token_timelines. A span from another
SDK (an int array, no summary) keeps its offsets in SpanAttributes, where the promoted columns compute
the longest gap from them, and reaches the timelines table once, not twice. llm_token_events reads
the same rows for both.
"""

from __future__ import annotations

import pytest

from infersight import attributes as attr
from infersight.config import parse_config
from infersight.pipelines.receiver.service import Receiver, ReceiverThread
from infersight.pipelines.schema import migrations
from infersight.pipelines.schema.ddl import DEFAULT_TABLES as T
from infersight.pipelines.schema.ddl import SchemaOptions
from tests.pipelines.receiver_payloads import any_value, post, request

pytestmark = pytest.mark.real

OURS = {attr.REQUEST_OUTCOME: "success", attr.GEN_AI_REQUEST_MODEL: "llama", attr.INSTANCE: "10.0.0.1:8000",
        attr.TOKEN_OFFSETS_US: "[1000,2000,5500]", attr.TOKEN_GAP_MAX_MS: 3.5, attr.TOKEN_STALL_OFFSET_MS: 2.0,
        attr.GEN_AI_USAGE_INPUT_TOKENS: 812, attr.GEN_AI_USAGE_OUTPUT_TOKENS: 3, attr.TTFT_MS: 1.0}
THEIRS = {attr.REQUEST_OUTCOME: "success", attr.GEN_AI_REQUEST_MODEL: "qwen", attr.INSTANCE: "10.0.0.2:8000"}


def test_our_timeline_leaves_the_span_and_another_sdks_stays(clickhouse_server, clickhouse_database, tmp_path):
    db = clickhouse_database
    config = parse_config({"pipeline": {"batch_seconds": 0.2}})
    admin = clickhouse_server.client()
    migrations.migrate(admin, SchemaOptions.from_config(config, db))
    body = request(spans=2, service="gateway", attributes=OURS)
    theirs = request(spans=1, service="other-sdk", attributes=THEIRS)
    span = theirs.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key=attr.TOKEN_OFFSETS_US).value.CopyFrom(any_value([1000, 4000, 4500, 9000]))
    body.resource_spans.extend(theirs.resource_spans)

    receiver = ReceiverThread(Receiver(config, dsn=clickhouse_server.dsn(db), http_listen="127.0.0.1:0",
                                       grpc_listen="127.0.0.1:0", spool_dir=str(tmp_path / "spool"))).start()
    try:
        status, _, answer = post(receiver.http_url + "/v1/traces", body.SerializeToString())
        assert status == 200, answer
    finally:
        receiver.stop()

    spans = admin.query(
        f"SELECT ServiceName, mapContains(SpanAttributes, {{key:String}}), SpanAttributes[{{key:String}}], "
        f"TokenGapMaxMs, TokenStallOffsetMs, Model, InputTokens, OutputTokens, TtftMs, length(SpanAttributes) "
        f"FROM `{db}`.`{T.traces}` ORDER BY ServiceName",
        parameters={"key": attr.TOKEN_OFFSETS_US}).result_rows
    assert [row[:2] for row in spans] == [("gateway", False), ("gateway", False), ("other-sdk", True)]
    assert spans[2][2] == "[1000,4000,4500,9000]"  # as the Collector stores an int array
    assert [row[3:5] for row in spans] == [(3.5, 2.0), (3.5, 2.0), (4.5, 4.5)]  # the summary; computed from the offsets
    assert [row[5] for row in spans] == ["llama", "llama", "qwen"]
    # Everything else of our span stays: its attributes less the one, and the columns made from them.
    assert [row[6:9] for row in spans] == [(812, 3, 1.0), (812, 3, 1.0), (0, 0, None)]
    assert [row[9] for row in spans] == [len(OURS) - 1, len(OURS) - 1, len(THEIRS) + 1]

    timelines = admin.query(f"SELECT ServiceName, Model, Instance, OffsetsUs FROM `{db}`.`{T.token_timelines}` "
                            "ORDER BY ServiceName").result_rows
    assert timelines == [("gateway", "llama", "10.0.0.1:8000", "[1000,2000,5500]")] * 2 + [
        ("other-sdk", "qwen", "10.0.0.2:8000", "[1000,4000,4500,9000]")]
    tokens = admin.query(f"SELECT Model, groupArray(GapUs) FROM (SELECT * FROM `{db}`.`{T.token_events}` "
                         "ORDER BY SpanId, TokenIndex) GROUP BY Model, SpanId ORDER BY Model").result_rows
    assert tokens == [("llama", [0, 1000, 3500])] * 2 + [("qwen", [0, 3000, 500, 4500])]

"""The one content filter (DESIGN 11): every convention, every attribute place, both letter
cases, over OTLP/HTTP and OTLP/gRPC into a real ClickHouse, and the same keys in the Collector config."""

from __future__ import annotations

import re

import grpc
import pytest
import yaml

from infersight.config import parse_config
from infersight.pipelines import content_filter
from infersight.pipelines.otelcol.config import CONTENT_PROCESSOR, check, render
from tests.pipelines.receiver_payloads import any_value, migrate, post, request, start_receiver

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TEXT = "PROMPT-TEXT-MUST-NOT-BE-STORED"
# Keys that carry prompt or completion text, one per convention, in the letter cases senders use.
CONTENT_KEYS = [
    "gen_ai.prompt", "gen_ai.prompt.0.content", "gen_ai.completion.0.content", "gen_ai.input.messages",
    "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.event.content", "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result", "input.value", "output.value", "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.content", "llm.prompts.0.content", "llm.completions.0.content",
    "GEN_AI.PROMPT", "Gen_AI.Input.Messages", "INPUT.VALUE", "LLM.Output_Messages.0.message.content",
]
EVENT_ONLY_KEYS = ["content", "CONTENT", "message", "tool_calls"]
KEPT = {"gen_ai.request.model": "llama", "gen_ai.usage.prompt_tokens": "12", "llm.pool": "stable",
        "input.mime_type": "text/plain"}


def test_keys_match_case_insensitively_and_only_content():
    for key in CONTENT_KEYS:
        assert content_filter.is_content(key) and content_filter.is_content(key, event=True), key
    for key in EVENT_ONLY_KEYS:
        assert content_filter.is_content(key, event=True) and not content_filter.is_content(key), key
    for key in KEPT:
        assert not content_filter.is_content(key, event=True), key


def hostile_request():
    """Content keys in resource, span, event and link attributes, next to attributes that must stay."""
    # `content` on a span is not a GenAI content key (only in events): kept, with a harmless value here.
    req = request(spans=1, attributes={**KEPT, **dict.fromkeys(CONTENT_KEYS, TEXT), "content": "a span field"})
    rs = req.resource_spans[0]
    for key in CONTENT_KEYS:
        rs.resource.attributes.add(key=key).value.CopyFrom(any_value(TEXT))
    span = rs.scope_spans[0].spans[0]
    event = span.events.add(name="gen_ai.user.message", time_unix_nano=span.start_time_unix_nano + 1)
    for key in CONTENT_KEYS + EVENT_ONLY_KEYS:
        event.attributes.add(key=key).value.CopyFrom(any_value(TEXT))
    event.attributes.add(key="gen_ai.system").value.string_value = "vllm"
    link = span.links.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    for key in CONTENT_KEYS:
        link.attributes.add(key=key).value.CopyFrom(any_value([TEXT, {"nested": TEXT}]))
    link.attributes.add(key="llm.retry.attempt").value.int_value = 1
    return req


@pytest.fixture
def database(clickhouse_server, clickhouse_database):
    migrate(clickhouse_server, clickhouse_database)
    return clickhouse_database


def stored(clickhouse_server, database):
    client = clickhouse_server.client(database, role="reader")
    try:
        return client.query("SELECT ResourceAttributes, SpanAttributes, Events.Attributes, Links.Attributes, "
                            "toString(tuple(*)) FROM otel_traces").result_rows
    finally:
        client.close()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_content_is_dropped_everywhere(clickhouse_server, database, tmp_path, transport):
    handle = start_receiver(clickhouse_server.dsn(database), tmp_path / "spool")
    try:
        body = hostile_request().SerializeToString()
        if transport == "http":
            assert post(handle.http_url + "/v1/traces", body)[0] == 200
        else:
            with grpc.insecure_channel(handle.grpc_target) as channel:
                channel.unary_unary(EXPORT)(body, timeout=30)
    finally:
        handle.stop()
    [(resource, span, events, links, whole)] = stored(clickhouse_server, database)
    assert TEXT not in whole
    assert set(resource) == {"service.name"}
    assert span == {**KEPT, "content": "a span field"}
    assert events == [{"gen_ai.system": "vllm"}]
    assert links == [{"llm.retry.attempt": "1"}]


def test_content_is_kept_when_enabled(clickhouse_server, database, tmp_path):
    handle = start_receiver(clickhouse_server.dsn(database), tmp_path / "spool", store_content=True)
    try:
        assert post(handle.http_url + "/v1/traces", hostile_request().SerializeToString())[0] == 200
    finally:
        handle.stop()
    [(resource, span, events, links, _)] = stored(clickhouse_server, database)
    assert set(CONTENT_KEYS) <= set(span) and set(CONTENT_KEYS) <= set(resource)
    assert set(CONTENT_KEYS + EVENT_ONLY_KEYS) <= set(events[0]) and set(CONTENT_KEYS) <= set(links[0])


def delete_matching_keys(attributes: dict, pattern: str) -> dict:
    """OTTL's delete_matching_keys (Go regexp; the pattern uses only syntax Python's re reads alike)."""
    return {k: v for k, v in attributes.items() if not re.search(pattern, k)}


@pytest.mark.parametrize("name", ["collector", "loadbalancer"])
def test_collector_config_drops_the_same_keys_first(name):
    document = yaml.safe_load(render(parse_config({}), name))
    assert check(document) == []
    for pipeline in document["service"]["pipelines"].values():
        chain = pipeline["processors"]
        assert chain.index(CONTENT_PROCESSOR) == 1 and chain[0] == "memory_limiter"
    statements = {s["context"]: s["statements"] for s in
                  document["processors"][CONTENT_PROCESSOR]["trace_statements"]}
    assert set(statements) == {"resource", "span", "spanevent"}
    for context, lines in statements.items():
        [line] = lines
        pattern = re.fullmatch(r'delete_matching_keys\(attributes, "([^"\\]+)"\)', line).group(1)
        assert pattern == content_filter.pattern(event=context == "spanevent")
        keys = CONTENT_KEYS + (EVENT_ONLY_KEYS if context == "spanevent" else [])
        attributes = {**dict.fromkeys(keys, TEXT), **KEPT}
        assert delete_matching_keys(attributes, pattern) == KEPT, context


def test_collector_config_keeps_content_when_enabled_and_requires_the_token(tmp_path):
    config = parse_config({"pipeline": {"store_content": True, "auth_token_file": "/etc/infersight/token"}})
    for name in ("collector", "loadbalancer"):
        document = yaml.safe_load(render(config, name))
        assert check(document) == []
        assert CONTENT_PROCESSOR not in document["processors"]
        assert document["extensions"]["bearertokenauth"] == {"filename": "/etc/infersight/token"}
        assert "bearertokenauth" in document["service"]["extensions"]
        for protocol in document["receivers"]["otlp"]["protocols"].values():
            assert protocol["auth"] == {"authenticator": "bearertokenauth"}
    balancer = yaml.safe_load(render(config, "loadbalancer"))["exporters"]["loadbalancing"]
    assert balancer["protocol"]["otlp"]["auth"] == {"authenticator": "bearertokenauth"}
    assert "bearertokenauth" not in render(parse_config({}), "collector")


def test_check_refuses_files_that_are_not_collector_configs():
    infersight_yaml = {"cluster": "prod", "clickhouse": {"dsn": "http://127.0.0.1:8123/default"}, "pipeline": {}}
    [problem] = check(infersight_yaml)
    assert "not an OpenTelemetry Collector config" in problem and "infersight.yaml" in problem
    assert "not an OpenTelemetry Collector config" in check({"receivers": {}})[0]
    assert "not an OpenTelemetry Collector config" in check(["a", "list"])[0]

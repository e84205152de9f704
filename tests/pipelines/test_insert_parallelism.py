"""pipeline.insert_parallelism: ClickHouse's threads per insert, from the config to every insert."""

from __future__ import annotations

import pytest

from infersight.pipelines.receiver import ingest_sql
from tests.pipelines.receiver_payloads import migrate, post, request, start_receiver


def test_settings_carry_the_threads_only_when_more_than_one():
    assert ingest_sql.settings("t", 1).get("max_insert_threads") is None
    assert ingest_sql.settings("t", 3)["max_insert_threads"] == "3"
    assert ingest_sql.settings("t", 3)["insert_deduplication_token"] == "t"


@pytest.mark.parametrize("threads", [1, 4])
def test_every_span_and_timeline_is_stored_whatever_the_parallelism(threads, clickhouse_server, clickhouse_database,
                                                                   tmp_path):
    migrate(clickhouse_server, clickhouse_database)
    handle = start_receiver(clickhouse_server.dsn(clickhouse_database), tmp_path / "spool",
                            insert_parallelism=threads)
    try:
        assert handle.receiver.sink.insert_parallelism == threads
        body = request(spans=50, attributes={"llm.request.outcome": "success",
                                             "llm.token.offsets_us": "[10,20,35]"}).SerializeToString()
        status, _, _ = post(f"{handle.http_url}/v1/traces", body)
        assert status == 200  # acknowledged: stored
    finally:
        handle.stop()
    client = clickhouse_server.client(clickhouse_database)
    assert client.query("SELECT count() FROM otel_traces").result_rows == [(50,)]
    assert client.query("SELECT count(), sum(GapUs) FROM llm_token_events").result_rows == [(150, 50 * 25)]


def test_the_config_refuses_a_parallelism_below_one():
    from pydantic import ValidationError

    from infersight.config import Config

    with pytest.raises(ValidationError, match="insert_parallelism"):
        Config.model_validate({"pipeline": {"insert_parallelism": 0}})

"""Table names from clickhouse.tables, end to end on the real ClickHouse: migrate, write, query.

The schema module defines the names; a config that renames every table must give a schema under the
new names only, a receiver that writes there (and says so in its batch metrics), and queries, the
CLI and the dashboards' trace view that read there.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.request

import pytest

from infersight import attributes as attr
from infersight.cli import main
from infersight.config import ConfigError, parse_config
from infersight.dashboards import traces as traces_dashboard
from infersight.pipelines.queries import library
from infersight.pipelines.receiver.service import Receiver, ReceiverThread
from infersight.pipelines.schema import migrations
from infersight.pipelines.schema.ddl import DEFAULT_TABLES, SchemaOptions, Tables
from tests.pipelines.receiver_payloads import metric, post, request

NAMES = {"traces": "ml_spans", "token_timelines": "ml_timelines", "token_events": "ml_tokens",
         "requests_1m": "ml_minutes", "migrations": "ml_schema_versions"}


def test_names_are_plain_and_distinct():
    assert Tables.from_config(parse_config({})) == DEFAULT_TABLES
    tables = Tables.from_config(parse_config({"clickhouse": {"tables": {"traces": "ml_spans"}}}))
    assert (tables.traces, tables.trace_id_ts, tables.token_events) == ("ml_spans", "ml_spans_trace_id_ts",
                                                                        DEFAULT_TABLES.token_events)
    for tables, message in ([{"traces": "x; DROP TABLE y"}, "letters, digits and _"],
                            [{"traces": "1spans"}, "letters, digits and _"],
                            [{"token_events": DEFAULT_TABLES.traces}, "named alike"]):
        with pytest.raises(ConfigError, match=message):
            parse_config({"clickhouse": {"tables": tables}})


@pytest.mark.real
def test_renamed_tables_migrate_write_and_query(clickhouse_server, clickhouse_database, tmp_path, capsys):
    db = clickhouse_database
    config = parse_config({"clickhouse": {"tables": NAMES},
                           "pipeline": {"batch_seconds": 0.2, "retry_initial_seconds": 0.05}})
    tables = Tables.from_config(config)
    admin = clickhouse_server.client()
    applied = migrations.migrate(admin, SchemaOptions.from_config(config, db))
    assert applied == list(migrations.MIGRATIONS)
    created = {r[0] for r in admin.query("SELECT name FROM system.tables WHERE database = {db:String}",
                                         parameters={"db": db}).result_rows}
    assert created == {"ml_spans", "ml_spans_trace_id_ts", "ml_spans_trace_id_ts_mv", "ml_timelines",
                       "ml_timelines_mv", "ml_tokens", "ml_minutes", "ml_minutes_mv", "ml_schema_versions",
                       "ml_spans_intake", "ml_spans_mv", "ml_timelines_intake_mv"}
    # Run again: the applied versions are read back from the renamed migrations table.
    assert migrations.migrate(admin, SchemaOptions.from_config(config, db)) == []

    # Write through the real receiver with the same config.
    receiver = ReceiverThread(Receiver(config, dsn=clickhouse_server.dsn(db), http_listen="127.0.0.1:0",
                                       grpc_listen="127.0.0.1:0", spool_dir=str(tmp_path / "spool"))).start()
    try:
        body = request(spans=3, tokens=4, attributes={
            attr.REQUEST_OUTCOME: "success", attr.GEN_AI_REQUEST_MODEL: "llama", attr.INSTANCE: "10.0.0.1:8000",
            attr.POOL: "stable", attr.TTFT_MS: 120.0})
        status, _, answer = post(receiver.http_url + "/v1/traces", body.SerializeToString())
        assert status == 200, answer
        text = urllib.request.urlopen(receiver.http_url + "/metrics").read().decode()
    finally:
        receiver.stop()
    assert metric(text, "infersight_pipeline_batch_rows_count", table="ml_spans") >= 1
    counts = {name: admin.query(f"SELECT count() FROM `{db}`.`{name}`").result_rows[0][0]
              for name in ("ml_spans", "ml_spans_trace_id_ts", "ml_timelines", "ml_tokens", "ml_minutes")}
    assert counts["ml_spans"] == 3 and counts["ml_timelines"] == 3 and counts["ml_tokens"] == 12
    assert counts["ml_spans_trace_id_ts"] >= 3 and counts["ml_minutes"] >= 1

    # Query: the library, the CLI and the dashboards' trace view read the renamed tables.
    reader = clickhouse_server.client(db, role="reader")
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    start, end = now - dt.timedelta(hours=1), now + dt.timedelta(minutes=1)
    slowest = library.slowest(reader, db, start, end, tables=tables)
    assert len(slowest) == 3 and {r["ttft_ms"] for r in slowest} == {120.0}
    trace = slowest[0]["trace_id"]
    assert [s["span_id"] for s in library.trace_spans(reader, db, trace, tables=tables)]
    assert len(library.token_timeline(reader, db, trace, tables=tables)) == 4
    assert {r["instance"] for r in library.percentiles(reader, db, start, end, tables=tables)} == {"10.0.0.1:8000"}
    assert len(reader.query(traces_dashboard.trace_view_sql(db, trace, tables)).result_rows) == 1
    with pytest.raises(Exception, match="UNKNOWN_TABLE|doesn't exist|does not exist"):
        library.slowest(reader, db, start, end)  # the schema's default names: not there

    config_file = tmp_path / "infersight.yaml"
    config_file.write_text(json.dumps({"clickhouse": {"tables": NAMES}}))
    assert main(["--config", str(config_file), "traces", "slowest", "--dsn", clickhouse_server.dsn(db, "reader"),
                 "--since", "1h", "--format", "json"]) == 0
    assert {r["trace_id"] for r in json.loads(capsys.readouterr().out)} == {r["trace_id"] for r in slowest}

"""The OpenTelemetry Collector path: shipped configs render and read clean against documented options."""

from __future__ import annotations

import copy

import pytest
import yaml

from infersight.cli import main
from infersight.config import Config
from infersight.pipelines.otelcol.config import ENV, check, load, render
from infersight.pipelines.receiver import ingest_sql
from infersight.pipelines.schema import ddl

TABLES = ddl.DEFAULT_TABLES  # the schema's table names


@pytest.mark.parametrize("name", ["collector", "loadbalancer"])
def test_shipped_configs_are_clean_and_render_from_infersight_yaml(name):
    assert check(load(name)) == []
    config = Config.model_validate({"clickhouse": {"dsn": "http://ch.internal:8123/traces"},
                                    "listeners": {"otlp_grpc": "0.0.0.0:4317"}})
    text = render(config, name)
    assert [m.group(1) for m in ENV.finditer(text)] == (["CLICKHOUSE_PASSWORD"] if name == "collector" else [])
    rendered = yaml.safe_load(text)
    assert check(rendered) == []
    assert rendered["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "0.0.0.0:4317"
    if name == "collector":
        exporter = rendered["exporters"]["clickhouse"]
        assert (exporter["endpoint"], exporter["database"]) == ("http://ch.internal:8123", "traces")
        assert exporter["create_schema"] is False and exporter["traces_table_name"] == TABLES.traces
        slow = next(p for p in rendered["processors"]["tail_sampling"]["policies"] if p["type"] == "latency")
        assert slow["latency"]["threshold_ms"] == 10_000  # 10 x the 1 s TTFT SLO



@pytest.mark.parametrize(("dsn", "endpoint", "database", "user"), [
    ("https://infersight_writer@ch.internal/traces", "https://ch.internal:8443", "traces", "infersight_writer"),
    # No user in the DSN: the writer of `infersight up`'s store, which has no usable `default` user.
    ("http://[::1]:9123/db", "http://[::1]:9123", "db", "infersight_writer"),
])
def test_the_exporter_endpoint_comes_from_the_parsed_dsn(dsn, endpoint, database, user):
    """The DSN is read by infersight.dsn, as everywhere: https's default port, IPv6 brackets, the user."""
    exporter = yaml.safe_load(render(Config.model_validate({"clickhouse": {"dsn": dsn}})))["exporters"]["clickhouse"]
    assert (exporter["endpoint"], exporter["database"], exporter["username"]) == (endpoint, database, user)

def test_the_exporter_password_comes_from_a_password_file_or_the_environment(tmp_path):
    plain = tmp_path / "ch-password"
    plain.write_text("s3cret\n")
    ours = tmp_path / "credentials.json"
    ours.write_text('{"writer": {"user": "infersight_writer", "password": "x"}}')

    def exporter(dsn: str) -> tuple[dict, str]:
        text = render(Config.model_validate({"clickhouse": {"dsn": dsn, "data_dir": str(tmp_path)}}))
        return yaml.safe_load(text)["exporters"]["clickhouse"], text

    conf, text = exporter(f"https://ops@ch.internal/traces?password_file={plain}")
    assert (conf["username"], conf["password"]) == ("ops", f"${{file:{plain}}}")  # the Collector's file provider
    assert "s3cret" not in text
    conf, text = exporter(f"https://infersight_writer@ch.internal/traces?password_file={ours}")
    assert conf["password"] == "${env:CLICKHOUSE_PASSWORD}"  # a JSON file of two roles is no password
    assert f'"writer" entry of {ours}' in text
    conf, text = exporter("http://127.0.0.1:8123/default")
    assert (conf["username"], conf["password"]) == ("infersight_writer", "${env:CLICKHOUSE_PASSWORD}")
    assert f"jq -r .writer.password {tmp_path / 'credentials.json'}" in text


@pytest.mark.real
def test_the_rendered_exporter_user_can_write_to_the_embedded_store(clickhouse_server, clickhouse_database):
    """What the rendered config tells the Collector (user, and the password its note points to) is accepted
    by `infersight up`'s store for an insert into otel_traces; the user the config used to default to is not."""
    import clickhouse_connect

    from infersight.pipelines import clickhouse_users
    from infersight.pipelines.schema import migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    admin = clickhouse_server.client()
    migrations.migrate(admin, SchemaOptions(database=clickhouse_database))
    admin.close()
    config = Config.model_validate({"clickhouse": {"dsn": f"{clickhouse_server.url}/{clickhouse_database}",
                                                   "data_dir": str(clickhouse_server.data_dir)}})
    conf = yaml.safe_load(render(config))["exporters"]["clickhouse"]
    password = clickhouse_users.load(clickhouse_server.data_dir).role(clickhouse_users.WRITER).password

    def insert(user: str, secret: str) -> None:
        client = clickhouse_connect.get_client(host=clickhouse_server.host, port=clickhouse_server.port,
                                               username=user, password=secret, database=conf["database"])
        try:
            client.command(f"INSERT INTO {TABLES.traces} (TraceId, SpanId, ServiceName) VALUES ('t', 's', 'otelcol')")
        finally:
            client.close()

    insert(conf["username"], password)
    with pytest.raises(Exception, match="Authentication failed|AUTHENTICATION_FAILED|REQUIRED_PASSWORD|516"):
        insert("default", "")


def test_our_receiver_and_the_collector_write_the_same_columns():
    query = ingest_sql.insert_query("default")
    columns = query.split("(", 1)[1].split(")", 1)[0]
    assert [c.strip().strip("`") for c in columns.split(",")] == list(ddl.EXPORTER_INSERT_COLUMNS)


def broken(edit) -> list[str]:
    document = copy.deepcopy(load("collector"))
    edit(document)
    return check(document)


@pytest.mark.parametrize("edit, problem", [
    (lambda d: d["exporters"]["clickhouse"].update(create_schema=True), "create_schema must be false"),
    (lambda d: d["exporters"]["clickhouse"].pop("create_schema"), "create_schema must be false"),
    (lambda d: d["exporters"]["clickhouse"].update(ttl="72h"), "retention is set by"),
    (lambda d: d["exporters"]["clickhouse"].update(traces_table="x"), "traces_table: not a documented option"),
    (lambda d: d["exporters"]["clickhouse"].update(traces_table_name="spans"), "must be otel_traces"),
    (lambda d: d["exporters"]["clickhouse"]["sending_queue"].update(size=5), "sending_queue.size"),
    (lambda d: d["service"]["pipelines"]["traces"].update(processors=["batch", "tail_sampling"]),
     "after tail_sampling"),
    (lambda d: d["service"]["pipelines"]["traces"].update(exporters=["kafka"]), "kafka is not defined"),
    (lambda d: d["processors"]["tail_sampling"]["policies"].pop(2), "no 'latency' policy"),
    (lambda d: d["processors"]["tail_sampling"]["policies"][0].update(type="sometimes"), "unknown type"),
    (lambda d: d["processors"]["tail_sampling"]["policies"][1]["string_attribute"].update(key="outcome"),
     "not an attribute we write"),
    (lambda d: d["processors"].update(groupbytrace={}), "not a component this check knows"),
])
def test_check_catches_mistakes(edit, problem):
    problems = broken(edit)
    assert any(problem in p for p in problems), problems


def test_cli_render_and_check(tmp_path, capsys):
    assert main(["otelcol", "render"]) == 0
    assert "create_schema: false" in capsys.readouterr().out
    good = tmp_path / "good.yaml"
    good.write_text(render(Config()))
    assert main(["otelcol", "check", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(render(Config()).replace("create_schema: false", "create_schema: true"))
    assert main(["otelcol", "check", str(bad)]) == 1
    assert "create_schema must be false" in capsys.readouterr().err
    assert main(["otelcol", "check", str(tmp_path / "missing.yaml")]) == 2
    (tmp_path / "junk.yaml").write_text("a: [")
    assert main(["otelcol", "check", str(tmp_path / "junk.yaml")]) == 2
    assert "not valid YAML" in capsys.readouterr().err

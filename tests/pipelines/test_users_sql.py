"""`db render --users` checked on a real ClickHouse (chdb-core, DESIGN 6), not only as text.

clickhouse-local (the engine of chdb-core) keeps users in users.xml only: it has no access storage that
CREATE USER could write to. So the rendered script is checked in two steps on the real engine:

- every statement, for a server and for a cluster, is parsed by ClickHouse itself (``formatQuery``);
- the script's users are given to a fresh clickhouse-local as users.xml: the SHA-256 hash and the
  settings profile of its CREATE statements, and its GRANT statements as ``<grants>`` queries, which
  ClickHouse executes as grants. SHOW GRANTS then lists exactly those rights, and with them the writer
  runs ``db migrate`` and the receiver's insert into a database that does not exist yet, the reader
  only reads, and neither reaches the host (``file``, ``url``) or another database.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infersight.pipelines import clickhouse_users
from infersight.pipelines.receiver import ingest_sql
from infersight.pipelines.schema import ddl, migrations
from infersight.pipelines.schema.ddl import SchemaOptions
from tests.pipelines.receiver_payloads import request
from tests.pipelines.sql_users_server import SqlUsersServer

TABLES = ddl.DEFAULT_TABLES  # the schema's table names

DATABASE = "traces"
pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def credentials(tmp_path_factory):
    return clickhouse_users.ensure(tmp_path_factory.mktemp("credentials"))


@pytest.mark.parametrize("cluster", [None, "llm"])
def test_every_rendered_statement_parses_in_clickhouse(clickhouse_server, credentials, cluster):
    client = clickhouse_server.client(role="reader")
    try:
        for statement in clickhouse_users.render_sql(credentials, DATABASE, cluster):
            formatted = client.query("SELECT formatQuery({q:String})", parameters={"q": statement}).result_rows[0][0]
            assert formatted.split()[0] == statement.split()[0]
    finally:
        client.close()


def users_xml_from(statements: list[str], credentials) -> str:
    """users.xml holding the script's two users: hash and profile from CREATE USER / PROFILE, rights from GRANT."""
    users = []
    for role in (credentials.writer, credentials.reader):
        quoted = ddl.identifier(role.user)
        [create] = [s for s in statements if s.startswith(f"CREATE USER IF NOT EXISTS {quoted} ")]
        password_hash = re.search(r"sha256_hash BY '([0-9a-f]{64})'", create).group(1)
        profile = re.search(r"SETTINGS PROFILE (\w+)$", create).group(1)
        grants = [s.removesuffix(f" TO {quoted}") for s in statements if s.startswith("GRANT") and s.endswith(quoted)]
        revokes = [s for s in statements if s == f"REVOKE ALL ON *.* FROM {quoted}"]
        assert revokes and grants, statements  # REVOKE ALL has nothing to take from a user created here
        queries = "".join(f"<query>{g}</query>" for g in grants)
        users.append(f"<{role.user}><password_sha256_hex>{password_hash}</password_sha256_hex>"
                     f"<networks><ip>127.0.0.1</ip></networks><profile>{profile}</profile><quota>default</quota>"
                     f"<grants>{queries}</grants></{role.user}>")
    profiles = []
    for statement in statements:
        match = re.match(r"CREATE SETTINGS PROFILE IF NOT EXISTS (\w+)(?: SETTINGS (\w+) = (\d+) CONST)?$", statement)
        if match:
            name, setting, value = match.groups()
            profiles.append(f"<{name}>" + (f"<{setting}>{value}</{setting}>" if setting else "") + f"</{name}>")
    assert len(profiles) == 2, statements
    return "".join(users), "".join(profiles)


@pytest.fixture(scope="module")
def server(tmp_path_factory, credentials):
    statements = clickhouse_users.render_sql(credentials, DATABASE)
    users, profiles = users_xml_from(statements, credentials)
    with SqlUsersServer(Path(tmp_path_factory.mktemp("sql-users")), users=users, profiles=profiles) as running:
        yield running


def as_role(server, credentials, role: str, database: str = "default"):
    entry = credentials.role(role)
    return server.client(entry.user, entry.password, database=database)


def test_show_grants_lists_exactly_the_roles(server, credentials):
    admin = server.client()
    try:
        grants = {role: sorted(r[0] for r in admin.query(f"SHOW GRANTS FOR {credentials.role(role).user}").result_rows)
                  for role in (clickhouse_users.WRITER, clickhouse_users.READER)}
    finally:
        admin.close()
    reader = credentials.reader.user
    [reader_grant] = grants[clickhouse_users.READER]
    privileges = re.fullmatch(rf"GRANT (.+) ON {DATABASE}\.\* TO {reader}", reader_grant).group(1)
    assert set(privileges.split(", ")) == set(clickhouse_users.READER_GRANTS.split(", "))
    engines = {e for g in grants[clickhouse_users.WRITER] for e in re.findall(r"TABLE ENGINE ON `?(\w+)", g)}
    assert engines == set(clickhouse_users.TABLE_ENGINES)
    on_database = [g for g in grants[clickhouse_users.WRITER] if f" ON {DATABASE}.* " in g]
    assert len(on_database) == 1 and "INSERT" in on_database[0] and "CREATE DATABASE" in on_database[0]
    assert not any(re.search(r"\b(SOURCES|FILE|URL|REMOTE|S3|ON \*\.\*)", g) for g in sum(grants.values(), []))


def test_the_writer_migrates_and_inserts_as_the_receiver_does(server, credentials):
    writer = as_role(server, credentials, clickhouse_users.WRITER)
    try:
        applied = migrations.migrate(writer, SchemaOptions(database=DATABASE))  # creates the database too
        assert applied and migrations.migrate(writer, SchemaOptions(database=DATABASE)) == []
        body = ingest_sql.frame([request(spans=3, tokens=4).SerializeToString()])
        writer.command(ingest_sql.insert_query(DATABASE), data=body, settings=ingest_sql.settings("users-sql"))
        assert writer.query(f"SELECT count() FROM {DATABASE}.{TABLES.traces}").result_rows == [(3,)]
        for refused in (f"SELECT * FROM file('{credentials.path}', 'LineAsString')",
                        "SELECT * FROM url('http://127.0.0.1:9/', 'LineAsString', 'x String')",
                        "CREATE DATABASE elsewhere", "CREATE USER evil IDENTIFIED BY 'x'"):
            with pytest.raises(Exception, match="ACCESS_DENIED|Not enough privileges"):
                writer.command(refused)
    finally:
        writer.close()


def test_the_reader_only_reads(server, credentials):
    writer = as_role(server, credentials, clickhouse_users.WRITER)
    migrations.migrate(writer, SchemaOptions(database=DATABASE))
    writer.close()
    reader = as_role(server, credentials, clickhouse_users.READER, DATABASE)
    try:
        assert reader.query(f"SELECT count() >= 0 FROM {TABLES.traces}").result_rows == [(True,)]
        for refused in (f"INSERT INTO {TABLES.traces} (TraceId) VALUES ('forged')", f"DROP TABLE {TABLES.traces}",
                        "CREATE TABLE t (x UInt8) ENGINE = Memory", "SET readonly = 0",
                        f"SELECT * FROM file('{credentials.path}', 'LineAsString')"):
            with pytest.raises(Exception, match="ACCESS_DENIED|Not enough privileges|READONLY|readonly"):
                reader.command(refused)
    finally:
        reader.close()

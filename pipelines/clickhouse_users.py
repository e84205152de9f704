"""The two ClickHouse roles of infersight, their credentials file, and how each store gets them.

- **writer** (``infersight_writer``): what the receiver and ``db migrate`` need: SELECT, INSERT and
  DDL on tables and views; no access management, no SYSTEM, no SOURCES (no ``file``, ``url``,
  ``remote``, ``s3``, ``executable``... table functions, no dictionaries from files).
- **reader** (``infersight_reader``): SELECT and SHOW only, ``readonly = 1`` (no INSERT, no DDL, no
  settings changes): the CLI, the incident report and Grafana.

Their random passwords live in ``<clickhouse.data_dir>/credentials.json`` (mode 0600, created on
first use and reused). The embedded store (:mod:`infersight.pipelines.clickhouse_server`) renders
them into the users.xml it starts with; against a ClickHouse server or cluster ``infersight db render
--users`` prints the same roles as SQL.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from infersight.pipelines.schema import ddl

CREDENTIALS_FILE = "credentials.json"
WRITER = "writer"
READER = "reader"
USERS = {WRITER: "infersight_writer", READER: "infersight_reader"}

# What each role may do, on every database (tests and sites use more than one). Host-touching table
# functions need SOURCES grants (FILE, URL, REMOTE, S3, ...) and dictionaries need CREATE DICTIONARY:
# neither role gets them, so ClickHouse refuses those with ACCESS_DENIED.
# On a server (render_sql) the writer's grants are on the one database; the embedded store's writer also
# creates and drops databases (WRITER_DATABASE_GRANTS), on *.*.
WRITER_TABLE_GRANTS = ("SELECT, INSERT, ALTER TABLE, ALTER VIEW, CREATE TABLE, CREATE VIEW, DROP TABLE, DROP VIEW, "
                       "TRUNCATE, OPTIMIZE, SYSTEM MERGES, SHOW TABLES, SHOW DATABASES, SHOW COLUMNS")
WRITER_DATABASE_GRANTS = "CREATE DATABASE, DROP DATABASE"
READER_GRANTS = "SELECT, SHOW TABLES, SHOW DATABASES, SHOW COLUMNS"
# Engines the migrations create (ClickHouse >= 24 checks TABLE ENGINE on CREATE TABLE).
TABLE_ENGINES = ("MergeTree", "ReplacingMergeTree", "AggregatingMergeTree", "SummingMergeTree", "Memory",
                 "ReplicatedMergeTree", "ReplicatedReplacingMergeTree", "ReplicatedAggregatingMergeTree",
                 "Distributed", "MaterializedView", "View", "Null")
# The writer's profile leaves Values expressions on: the migrations' INSERT ... VALUES with server-side
# parameters needs them, so the gate checks Values data for file() instead. It fixes the settings that
# name files on the host, which clickhouse-local reads or writes at any absolute path (a server confines
# them to its format_schema_path): Template's resultset and row files (their text came back in the error),
# the generated-schema file, and where a Protobuf schema comes from (inline text, as the receiver sends it).
WRITER_FIXED_SETTINGS = {"format_template_resultset": "", "format_template_row": "", "output_format_schema": "",
                         "format_schema_source": "string"}


@dataclass(frozen=True)
class Role:
    name: str  # writer or reader
    user: str
    password: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.password.encode()).hexdigest()


@dataclass(frozen=True)
class Credentials:
    path: Path
    writer: Role
    reader: Role

    def role(self, name: str) -> Role:
        return {WRITER: self.writer, READER: self.reader}[name]

    def by_user(self, user: str) -> Role | None:
        return next((r for r in (self.writer, self.reader) if r.user == user), None)


class CredentialsError(RuntimeError):
    """The credentials file is unreadable, damaged or readable by others."""


def credentials_path(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / CREDENTIALS_FILE


def load(data_dir: str | os.PathLike[str]) -> Credentials | None:
    """The credentials of the store in ``data_dir``, or None when it has none yet."""
    path = credentials_path(data_dir)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CredentialsError(f"{path}: cannot read the ClickHouse credentials ({exc.strerror})") from None
    try:
        document = json.loads(text)
        roles = {name: Role(name, document[name]["user"], document[name]["password"]) for name in USERS}
    except (ValueError, KeyError, TypeError):
        raise CredentialsError(f"{path}: not an infersight credentials file; move it away and start again "
                               "(`infersight up` creates a new one)") from None
    return Credentials(path, roles[WRITER], roles[READER])


def ensure(data_dir: str | os.PathLike[str]) -> Credentials:
    """Load the credentials of ``data_dir``, creating them (random passwords, mode 0600) on first use."""
    existing = load(data_dir)
    path = credentials_path(data_dir)
    if existing is not None:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            os.chmod(path, 0o600)  # someone widened it: the passwords must stay the owner's
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    roles = {name: {"user": user, "password": secrets.token_urlsafe(24)} for name, user in USERS.items()}
    # O_EXCL: two first starts racing never end with two different password sets.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return ensure(data_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(roles, f, indent=2)
        f.write("\n")
    return load(data_dir)


# Point reads (a trace, its timeline) decompress whole blocks of every column they touch: the embedded
# server keeps recent blocks decompressed (its config's uncompressed_cache_size) and both roles use them.
# ClickHouse bypasses the cache for reads over merge_tree_max_rows_to_use_cache rows, so window scans and
# merges do not evict a trace's blocks. Measured: benchmarks/README.md, issue 18, fifth session.
POINT_READ_SETTINGS = "<use_uncompressed_cache>1</use_uncompressed_cache>"


def users_xml(credentials: Credentials) -> str:
    """users.xml for the embedded clickhouse-local.

    clickhouse-local itself logs in as ``default`` with an empty password from the loopback address
    (chdb-core hard-codes it), so that user must exist; the HTTP gate in front of the listener
    (:mod:`infersight.pipelines.clickhouse_gate`) is what keeps every client away from it.
    """
    w, r = credentials.writer, credentials.reader
    engines = "".join(f"<query>GRANT TABLE ENGINE ON {e}</query>" for e in TABLE_ENGINES)
    fixed = "".join(f"<{name}>{value}</{name}>" for name, value in WRITER_FIXED_SETTINGS.items())
    constraints = "".join(f"<{name}><const/></{name}>" for name in WRITER_FIXED_SETTINGS)
    return f"""<clickhouse>
  <profiles>
    <default/>
    <infersight_writer>{POINT_READ_SETTINGS}{fixed}<constraints>{constraints}</constraints></infersight_writer>
    <infersight_reader><readonly>1</readonly>{POINT_READ_SETTINGS}</infersight_reader>
  </profiles>
  <quotas><default/></quotas>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota>
    </default>
    <{w.user}>
      <password_sha256_hex>{w.sha256}</password_sha256_hex>
      <networks><ip>::/0</ip></networks>
      <profile>infersight_writer</profile><quota>default</quota><default_database>default</default_database>
      <grants>
        <query>GRANT {WRITER_TABLE_GRANTS}, {WRITER_DATABASE_GRANTS} ON *.*</query>
        {engines}
      </grants>
    </{w.user}>
    <{r.user}>
      <password_sha256_hex>{r.sha256}</password_sha256_hex>
      <networks><ip>::/0</ip></networks>
      <profile>infersight_reader</profile><quota>default</quota><default_database>default</default_database>
      <grants><query>GRANT {READER_GRANTS} ON *.*</query></grants>
    </{r.user}>
  </users>
</clickhouse>
"""


def render_sql(credentials: Credentials, database: str, cluster: str | None = None) -> list[str]:
    """The same two roles for a ClickHouse server or cluster (passwords as SHA-256 hashes only).

    The script is authoritative: each user first loses every right (``REVOKE ALL``, so a user kept by
    ``IF NOT EXISTS`` keeps nothing from before), then gets exactly its role. The writer's rights are on
    the one database, plus ``CREATE DATABASE`` of that database only (``db migrate`` starts with
    ``CREATE DATABASE IF NOT EXISTS``, which ClickHouse checks even when it exists) and the table
    engines the migrations use (servers with ``table_engines_require_grant`` check them). No SOURCES:
    neither user reaches ``file``, ``url``, ``remote``, ``s3`` ... (tests/pipelines/test_users_sql.py
    runs these grants on a real ClickHouse).
    """
    on = f" ON CLUSTER {ddl.identifier(cluster)}" if cluster else ""
    db = ddl.identifier(database)
    w, r = credentials.writer, credentials.reader
    writer, reader = ddl.identifier(w.user), ddl.identifier(r.user)
    engines = ", ".join(f"TABLE ENGINE ON {engine}" for engine in TABLE_ENGINES)
    return [
        f"CREATE SETTINGS PROFILE IF NOT EXISTS infersight_writer{on}",
        f"CREATE SETTINGS PROFILE IF NOT EXISTS infersight_reader{on} SETTINGS readonly = 1 CONST",
        f"CREATE USER IF NOT EXISTS {writer}{on} IDENTIFIED WITH sha256_hash BY "
        f"{ddl.literal(w.sha256)} SETTINGS PROFILE infersight_writer",
        f"CREATE USER IF NOT EXISTS {reader}{on} IDENTIFIED WITH sha256_hash BY "
        f"{ddl.literal(r.sha256)} SETTINGS PROFILE infersight_reader",
        f"REVOKE{on} ALL ON *.* FROM {writer}",
        f"REVOKE{on} ALL ON *.* FROM {reader}",
        f"GRANT{on} {WRITER_TABLE_GRANTS} ON {db}.* TO {writer}",
        f"GRANT{on} CREATE DATABASE ON {db}.*, {engines} TO {writer}",
        f"GRANT{on} {READER_GRANTS} ON {db}.* TO {reader}",
    ]

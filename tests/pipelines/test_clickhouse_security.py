"""A hostile local client against `infersight up` (DESIGN 11), over real HTTP.

Without credentials nothing answers; the reader can SELECT but not INSERT, create, or touch the host;
the writer can insert and migrate but not touch the host either; a forged row never lands; meanwhile
the receiver still stores spans and the CLI still answers, each as its own role.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from infersight.cli import main
from infersight.pipelines import clickhouse_users
from tests.conftest import free_port, require_chdb
from tests.pipelines.encodings import encoded
from tests.pipelines.receiver_payloads import post, request, span_ids

pytestmark = pytest.mark.real  # a real ClickHouse server

SECRET_FILE = "/etc/hostname"  # any file the server process can read
HOST_TOUCHING = [
    f"SELECT * FROM file('{SECRET_FILE}', 'LineAsString')",
    f"SELECT file('{SECRET_FILE}')",
    f"SELECT `file`/* hidden */('{SECRET_FILE}')",
    f"SELECT `fil\\x65`('{SECRET_FILE}')",  # an escape in a quoted name: ClickHouse reads `file`
    f"SELECT \"\\x66ile\"('{SECRET_FILE}')",
    "SELECT * FROM url('http://127.0.0.1:9/', 'LineAsString')",
    "SELECT * FROM remote('127.0.0.1', system.one)",
    "SELECT * FROM s3('http://127.0.0.1:9/bucket/key', 'LineAsString')",
    f"SELECT * FROM executable('cat {SECRET_FILE}', 'LineAsString', 'line String')",
    "INSERT INTO FUNCTION file('pwned.txt', 'TSV', 'x UInt8') VALUES (1)",
    f"CREATE DICTIONARY d (x UInt64) PRIMARY KEY x SOURCE(FILE(path '{SECRET_FILE}' format 'TSV')) "
    "LAYOUT(FLAT()) LIFETIME(0)",
]


def http(url: str, sql: str, user: str | None = None, password: str = "", params: str = "",
         body: bytes | None = None, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"{url}/?query={urllib.parse.quote(sql)}{params}", data=body, method="POST",
                                 headers=headers or {})
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """`infersight up` as a process, on a free ClickHouse port given by the DSN."""
    require_chdb()
    tmp = tmp_path_factory.mktemp("up")
    port = free_port()
    ports_file = tmp / "ports.json"
    config = tmp / "infersight.yaml"
    config.write_text(f"clickhouse:\n  dsn: http://127.0.0.1:{port}/default\n  data_dir: {tmp / 'data'}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "infersight", "--config", str(config), "up", "--otlp-http", "127.0.0.1:0",
         "--otlp-grpc", "127.0.0.1:0", "--spool-dir", str(tmp / "spool"), "--ports-file", str(ports_file)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not ports_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"infersight up did not start: {proc.communicate()[0]}")
        time.sleep(0.1)
    credentials = clickhouse_users.load(tmp / "data")
    yield {"url": f"http://127.0.0.1:{port}", "config": config, "credentials": credentials, "tmp": tmp,
           "receiver": json.loads(ports_file.read_text()), "proc": proc}
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)


def test_credentials_file_is_private_and_reused(stack):
    path = stack["credentials"].path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = clickhouse_users.ensure(path.parent)
    assert again.writer.password == stack["credentials"].writer.password
    assert again.reader.password == stack["credentials"].reader.password != again.writer.password


@pytest.mark.parametrize("how", [
    {},  # no credentials at all
    {"user": "default"},  # the password-less default user
    {"params": "&user=default"},  # credentials in the URL
    {"params": "&%75ser=default&password="},  # ... percent-encoded
    {"headers": {"X-ClickHouse-User": "default"}},
    {"user": "infersight_reader", "password": "guess"},
])
def test_without_valid_credentials_nothing_answers(stack, how):
    status, text = http(stack["url"], "SELECT currentUser()", **how)
    assert status in (400, 401, 403), text
    assert "default" != text.strip()
    status, _ = http(stack["url"], "SELECT count() FROM default.otel_traces", **how)
    assert status in (400, 401, 403)


def test_reader_selects_but_cannot_write_or_touch_the_host(stack):
    r = stack["credentials"].reader
    assert http(stack["url"], "SELECT currentUser()", r.user, r.password) == (200, f"{r.user}\n")
    assert http(stack["url"], "SELECT count() >= 0 FROM default.otel_traces", r.user, r.password)[0] == 200
    for sql in ["INSERT INTO default.otel_traces (TraceId, SpanId, SpanName) VALUES ('ab', 'cd', 'forged')",
                "CREATE TABLE default.evil (x UInt8) ENGINE = MergeTree ORDER BY x",
                "DROP TABLE default.otel_traces", "ALTER TABLE default.otel_traces DELETE WHERE 1",
                "CREATE USER evil IDENTIFIED BY 'x'", "SET readonly = 0", "SYSTEM SHUTDOWN", *HOST_TOUCHING]:
        status, text = http(stack["url"], sql, r.user, r.password)
        assert status >= 400, f"reader ran {sql!r}: {text}"
        assert "ACCESS_DENIED" in text or "READONLY" in text or "readonly" in text.lower(), (sql, text)


def test_writer_writes_but_cannot_touch_the_host(stack):
    w = stack["credentials"].writer
    assert http(stack["url"], "CREATE TABLE IF NOT EXISTS default.scratch (x UInt8) ENGINE = MergeTree ORDER BY x",
                w.user, w.password)[0] == 200
    assert http(stack["url"], "INSERT INTO default.scratch VALUES (1)", w.user, w.password)[0] == 200
    for sql in [*HOST_TOUCHING, "CREATE USER evil IDENTIFIED BY 'x'", "SYSTEM SHUTDOWN"]:
        status, text = http(stack["url"], sql, w.user, w.password)
        assert status >= 400 and "ACCESS_DENIED" in text, f"writer ran {sql!r}: {text}"
    # Values data is parsed with expressions: file() there is refused too.
    status, text = http(stack["url"], "INSERT INTO default.scratch FORMAT Values", w.user, w.password,
                        body=f"(length(file('{SECRET_FILE}')))".encode())
    assert status == 403 and "ACCESS_DENIED" in text
    assert not (stack["tmp"] / "pwned.txt").exists()



PAD = " " * 70_000  # past any peek of the body's first bytes, well within ClickHouse's max_query_size
READ_HOST = f"length(file('{SECRET_FILE}'))"
# SQL that hides a file() call from a text check that reads it otherwise than ClickHouse: (role, query, body)
HIDDEN = [
    ("writer", "", f"INSERT INTO default.scratch SELECT {PAD}{READ_HOST}"),  # far into the body
    ("writer", "", f"INSERT INTO default.scratch {' ' * 5000}VALUES (1),{PAD}({READ_HOST})"),  # Values, far in
    ("reader", "SELECT 1, --", f" {READ_HOST}"),  # ClickHouse ends the comment with the newline it adds
    ("reader", f"SELECT '--', {READ_HOST}", None),  # a comment marker inside a string literal
    ("reader", f"SELECT $$#$$, {READ_HOST}", None),  # ... inside a heredoc
    ("writer", "INSERT INTO default.scratch SELECT 1 -- FORMAT CSV", f"UNION ALL SELECT {READ_HOST}"),
    ("writer", "INSERT INTO default.scratch SELECT length(concat(' FORMAT CSV", f"', file('{SECRET_FILE}')))"),
]


@pytest.mark.parametrize(("role", "query", "body"), HIDDEN)
def test_host_access_hidden_from_a_text_check_is_still_refused(stack, role, query, body):
    who, w = stack["credentials"].role(role), stack["credentials"].writer
    assert http(stack["url"], "CREATE TABLE IF NOT EXISTS default.scratch (x UInt8) ENGINE = MergeTree ORDER BY x",
                w.user, w.password)[0] == 200
    before = http(stack["url"], "SELECT count() FROM default.scratch", w.user, w.password)
    status, text = http(stack["url"], query, who.user, who.password, body=None if body is None else body.encode())
    assert status == 403 and "ACCESS_DENIED" in text, f"{role} ran {query!r} + {body!r:.80}: {text}"
    assert http(stack["url"], "SELECT count() FROM default.scratch", w.user, w.password) == before

# SQL whose compressed form hides the file() call: the compressor turns its second `file('` into a copy
# of the first one's bytes (`'xfile('`, no call), so only a reader of the decompressed text sees it.
COMPRESSIBLE = f"SELECT '{'a' * 200}', 'xfile(', length(file('{SECRET_FILE}'))"


@pytest.mark.parametrize("encoding", ["lz4", "zstd", "gzip", "deflate"])
def test_a_compressed_query_body_is_checked_as_clickhouse_reads_it(stack, encoding):
    """ClickHouse decompresses a query body by its Content-Encoding: the gate checks that text, never the
    compressed bytes (lz4 and zstd hid file() from it), and forwards what it checked."""
    from infersight.pipelines.clickhouse_gate import host_access

    r = stack["credentials"].reader
    body = encoded(encoding, COMPRESSIBLE)
    assert host_access(body.decode("utf-8", "replace")) is None  # the compressed bytes hide the call
    status, text = http(stack["url"], "", r.user, r.password, body=body, headers={"Content-Encoding": encoding})
    assert status == 403 and "ACCESS_DENIED" in text and "file()" in text, text
    # The same encoding with harmless SQL answers: checked and forwarded decompressed.
    status, text = http(stack["url"], "", r.user, r.password, body=encoded(encoding, "SELECT 40 + 2"),
                        headers={"Content-Encoding": encoding})
    assert (status, text) == (200, "42\n")


@pytest.mark.parametrize("encoding", ["br", "xz", "gzip, lz4"])
def test_a_query_body_in_an_encoding_the_gate_cannot_read_is_refused(stack, encoding):
    """ClickHouse reads more encodings (br, xz, bz2, snappy) than the gate decodes: those query bodies get a
    415 that names the ones it takes, whatever the bytes (the gate cannot tell what ClickHouse would run)."""
    r = stack["credentials"].reader
    status, text = http(stack["url"], "", r.user, r.password, body=b"\x00opaque",
                        headers={"Content-Encoding": encoding})
    assert status == 415 and "not accepted" in text and "lz4" in text, text


def test_a_query_body_is_read_whole_however_it_is_framed(stack):
    """A second gzip member or lz4/zstd frame is read on, as ClickHouse reads it (clickhouse-connect sends
    one frame per block), so a call split off into it is refused; a truncated stream, bytes that are not
    the encoding and ClickHouse's own compressed format (decompress=1) are refused unread."""
    r = stack["credentials"].reader
    for encoding in ("gzip", "lz4", "zstd"):
        frames = encoded(encoding, "SELECT 1 ") + encoded(encoding, f"UNION ALL SELECT {READ_HOST}")
        status, text = http(stack["url"], "", r.user, r.password, body=frames, headers={"Content-Encoding": encoding})
        assert status == 403 and "ACCESS_DENIED" in text, (encoding, text)
        frames = encoded(encoding, "SELECT 4") + encoded(encoding, "2")
        assert http(stack["url"], "", r.user, r.password, body=frames,
                    headers={"Content-Encoding": encoding}) == (200, "42\n"), encoding
        cut = encoded(encoding, COMPRESSIBLE)[:-6]
        status, text = http(stack["url"], "", r.user, r.password, body=cut, headers={"Content-Encoding": encoding})
        assert status == 400 and f"inside a {encoding} stream" in text, (encoding, text)
    status, text = http(stack["url"], "", r.user, r.password, params="&decompress=1", body=b"SELECT 1")
    assert status == 400 and "decompress=1" in text
    status, text = http(stack["url"], "", r.user, r.password, body=b"not gzip", headers={"Content-Encoding": "gzip"})
    assert status == 400 and "not valid gzip" in text


def test_an_insert_statement_at_the_head_of_its_body_streams_its_data(stack):
    """clickhouse-connect puts `INSERT ... FORMAT Native` at the head of its compressed body: the gate checks
    the statement and streams the data on, so data over the 16 MiB SQL bound and data holding the text
    `file(` both insert, while the statement itself is checked and Values data is still read as SQL."""
    w = stack["credentials"].writer
    assert http(stack["url"], "CREATE TABLE IF NOT EXISTS default.headed (s String) ENGINE = MergeTree ORDER BY s",
                w.user, w.password)[0] == 200
    rows = "".join(f"row {i} calls file('{SECRET_FILE}')\n" for i in range(600_000))  # ~22 MiB of TSV
    for encoding in ("lz4", "identity"):
        body = ("INSERT INTO default.headed FORMAT TSV\n" + rows).encode()
        packed = encoded("lz4", body.decode()) if encoding == "lz4" else body
        status, text = http(stack["url"], "", w.user, w.password, body=packed, headers={"Content-Encoding": encoding})
        assert status == 200, (encoding, text[:300])
    counted = "SELECT count(), countIf(position(s, concat('fi', 'le(')) > 0) FROM default.headed"
    assert http(stack["url"], counted, w.user, w.password) == (200, "1200000\t1200000\n")
    # The statement is checked, and a Values insert (expressions) is checked whole.
    for body in (f"INSERT INTO default.headed SELECT toString({READ_HOST}) FORMAT TSV\n",
                 f"INSERT INTO default.headed FORMAT Values\n(toString({READ_HOST}))",
                 f"INSERT INTO default.headed FORMAT Values (toString(1)),\n(1 FORMAT TSV\n, toString({READ_HOST}))"):
        status, text = http(stack["url"], "", w.user, w.password, body=encoded("zstd", body),
                            headers={"Content-Encoding": "zstd"})
        assert status == 403 and "ACCESS_DENIED" in text, (body, text)


def test_a_compressed_insert_corrupt_after_its_statement_inserts_nothing(stack):
    """Data that stops being valid lz4 after the statement was passed is cut off: a clear 400, no rows."""
    w = stack["credentials"].writer
    assert http(stack["url"], "CREATE TABLE IF NOT EXISTS default.cut (x UInt32) ENGINE = MergeTree ORDER BY x",
                w.user, w.password)[0] == 200
    body = encoded("lz4", "INSERT INTO default.cut FORMAT TSV\n1\n") + b"\x04\x22\x4d\x18garbage"
    status, text = http(stack["url"], "", w.user, w.password, body=body, headers={"Content-Encoding": "lz4"})
    assert status == 400 and "lz4" in text, text
    assert http(stack["url"], "SELECT count() FROM default.cut", w.user, w.password) == (200, "0\n")


def test_a_compressed_query_body_over_the_bound_is_refused_unread(stack):
    """16 MiB of SQL compresses to a few KiB: the bound holds on the decompressed text (no zip bomb)."""
    r = stack["credentials"].reader
    bomb = encoded("zstd", "SELECT 1 -- " + "a" * (17 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    status, text = http(stack["url"], "", r.user, r.password, body=bomb, headers={"Content-Encoding": "zstd"})
    assert status == 413 and "16 MiB" in text, text


def test_clickhouse_connect_through_the_gate_reads_and_writes_compressed(stack):
    """clickhouse-connect compresses its bodies (lz4 first, if installed): its queries, commands and inserts
    pass the gate, and a file() call inside its compressed query body is still refused."""
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import DatabaseError

    w, r = stack["credentials"].writer, stack["credentials"].reader
    host, port = stack["url"].removeprefix("http://").rstrip("/").rsplit(":", 1)
    for compression in ("lz4", "zstd", "gzip"):
        writer = clickhouse_connect.get_client(host=host, port=int(port), username=w.user, password=w.password,
                                               compress=compression)
        writer.command("CREATE TABLE IF NOT EXISTS default.connected (x UInt32, c String) "
                       "ENGINE = MergeTree ORDER BY x")
        writer.insert("default.connected", [[1, compression], [2, compression]], column_names=["x", "c"])
        reader = clickhouse_connect.get_client(host=host, port=int(port), username=r.user, password=r.password,
                                               compress=compression)
        rows = reader.query("SELECT count() FROM default.connected WHERE c = {c:String}",
                            parameters={"c": compression}).result_rows
        assert rows == [(2,)], compression
        with pytest.raises(DatabaseError, match="ACCESS_DENIED"):
            reader.query(COMPRESSIBLE)
        writer.close()
        reader.close()


def test_a_compressed_insert_streams_through_as_sent(stack):
    """Insert data with a Content-Encoding reaches ClickHouse compressed, as sent (the gate used to inflate it
    on the way in and forward the header with plain bytes: ZLIB_INFLATE_FAILED)."""
    w = stack["credentials"].writer
    assert http(stack["url"], "CREATE TABLE IF NOT EXISTS default.packed (x UInt32) ENGINE = MergeTree ORDER BY x",
                w.user, w.password)[0] == 200
    for encoding, data in (("gzip", encoded("gzip", "1\n2\n")), ("deflate", encoded("deflate", "3\n")),
                           ("lz4", encoded("lz4", "4\n")), ("zstd", encoded("zstd", "5\n"))):
        status, text = http(stack["url"], "INSERT INTO default.packed FORMAT TSV", w.user, w.password, body=data,
                            headers={"Content-Encoding": encoding})
        assert status == 200, (encoding, text)
    assert http(stack["url"], "SELECT groupArray(x) FROM (SELECT x FROM default.packed ORDER BY x)",
                w.user, w.password) == (200, "[1,2,3,4,5]\n")


@pytest.mark.parametrize("setting", [
    "additional_result_filter=" + urllib.parse.quote(f"{READ_HOST} > 0"),
    "additional_table_filters=" + urllib.parse.quote("{'system.one': '" + READ_HOST.replace("'", "\\'") + " > 0'}"),
])
def test_sql_in_a_url_setting_is_checked_like_the_query(stack, setting):
    """Some settings are SQL the server evaluates: the writer (not readonly) could read files through them."""
    w = stack["credentials"].writer
    status, text = http(stack["url"], "SELECT * FROM system.one", w.user, w.password, params="&" + setting)
    assert status == 403 and "ACCESS_DENIED" in text and "additional_" in text, text
    # A query parameter is a typed literal, never SQL: one that reads like a call still answers.
    status, text = http(stack["url"], "SELECT {v:String} = 'length(fi' || 'le(\\'/etc/hostname\\'))'", w.user,
                        w.password, params="&param_v=" + urllib.parse.quote("length(file('/etc/hostname'))"))
    assert (status, text) == (200, "1\n"), text


@pytest.mark.parametrize("settings", [
    {"format_template_resultset": SECRET_FILE}, {"format_template_row": SECRET_FILE},
    {"output_format_schema": "{tmp}/written.proto"},
    {"format_schema_source": "file", "format_schema": f"{SECRET_FILE}:X"},
])
def test_the_writer_cannot_name_a_host_file_in_a_format_setting(stack, settings):
    """clickhouse-local opens these settings' files at any absolute path: Template's returned the file's text
    in its error message. The writer's profile fixes them (the reader may change no setting at all)."""
    w = stack["credentials"].writer
    settings = {name: value.format(tmp=stack["tmp"]) for name, value in settings.items()}
    in_query = ", ".join(f"{name} = '{value}'" for name, value in settings.items())
    in_url = "&" + urllib.parse.urlencode(settings)
    for sql, params in ((f"SELECT 1 AS x FORMAT Template SETTINGS {in_query}", ""), ("SELECT 1 AS x", in_url)):
        status, text = http(stack["url"], sql, w.user, w.password, params=params)
        assert status != 200 and "SETTING_CONSTRAINT_VIOLATION" in text, (params, text)
        assert open(SECRET_FILE).read().strip() not in text
    assert not (stack["tmp"] / "written.proto").exists()


def test_a_url_parameter_given_twice_is_refused(stack):
    """ClickHouse and the gate could each take a different `query`: the data-only fast path on one, SQL in
    the other."""
    w = stack["credentials"].writer
    params = "&query=" + urllib.parse.quote(f"SELECT {READ_HOST}")
    status, text = http(stack["url"], "INSERT INTO default.scratch FORMAT TSV", w.user, w.password, params=params,
                        body=b"1\n")
    assert status == 400 and "more than once: query" in text, text


def test_forged_row_is_refused_and_the_receiver_still_stores(stack):
    r = stack["credentials"].reader
    forged = "INSERT INTO default.otel_traces (TraceId, SpanId, SpanName) VALUES ('f0', 'f1', 'forged')"
    assert http(stack["url"], forged)[0] == 401
    assert http(stack["url"], forged, "default")[0] == 401
    req = request(spans=3)
    status, _, _ = post(f"http://127.0.0.1:{stack['receiver']['http']}/v1/traces", req.SerializeToString())
    assert status == 200
    status, text = http(stack["url"], "SELECT SpanId FROM default.otel_traces ORDER BY SpanId FORMAT TSV",
                        r.user, r.password)
    assert status == 200 and set(text.split()) == span_ids(req)
    assert "forged" not in http(stack["url"], "SELECT groupArray(SpanName) FROM default.otel_traces",
                                r.user, r.password)[1]


def test_cli_answers_as_the_reader_on_the_dsn_port(stack, capsys):
    """`up` served the DSN's (non-default) port; the CLI finds it and its reader from the same config."""
    assert main(["--config", str(stack["config"]), "db", "status", "--format", "json"]) == 0
    assert all(row["state"] == "applied" for row in json.loads(capsys.readouterr().out))
    assert main(["--config", str(stack["config"]), "traces", "slowest", "--since", "1h", "--format", "json"]) == 0
    capsys.readouterr()
    # a DSN naming the writer with the credentials file as its password_file works too
    w = stack["credentials"].writer
    dsn = f"http://{w.user}@{stack['url'][7:]}/default?password_file={stack['credentials'].path}"
    assert main(["db", "status", "--dsn", dsn]) == 0
    capsys.readouterr()
    assert main(["db", "status", "--dsn", f"http://infersight_reader:wrong@{stack['url'][7:]}/default"]) == 1
    err = capsys.readouterr().err
    assert "refused the credentials of 'infersight_reader'" in err and "Traceback" not in err


def test_span_text_that_looks_like_sql_is_stored(stack):
    """The receiver's insert carries its data apart from its SQL: a span saying file(...) is data, not
    refused. (Runs after the forged-row test, which counts every stored span.)"""
    r = stack["credentials"].reader
    req = request(spans=1, attributes={"llm.note": f"SELECT file('{SECRET_FILE}') -- not SQL here"})
    status, _, _ = post(f"http://127.0.0.1:{stack['receiver']['http']}/v1/traces", req.SerializeToString())
    assert status == 200
    [span_id] = span_ids(req)
    status, text = http(stack["url"], "SELECT SpanAttributes['llm.note'] FROM default.otel_traces WHERE SpanId = "
                        f"'{span_id}' FORMAT TSV", r.user, r.password)
    assert status == 200 and text.strip() == f"SELECT file(\\'{SECRET_FILE}\\') -- not SQL here"

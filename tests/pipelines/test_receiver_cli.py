"""``infersight receive`` and ``infersight up`` as commands: help, clear errors, and a real run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from infersight.cli import main
from tests.pipelines.receiver_payloads import post, request, span_ids


def test_help_describes_both_commands(capsys):
    for command in ("receive", "up"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--otlp-http" in out and "--clickhouse-port" in out and "spool" in out


@pytest.mark.parametrize("argv, message", [
    (["receive", "--dsn", "ftp://ch.internal/traces"], "expected http://, https:// or chdb://"),
    (["receive", "--otlp-http", "nowhere"], "expected HOST:PORT"),
    (["receive", "--otlp-grpc", "127.0.0.1:99999"], "expected HOST:PORT"),
])
def test_bad_arguments_exit_2_with_a_reason(argv, message, capsys, tmp_path):
    assert main([*argv, "--spool-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unreadable_token_file_is_a_config_error(tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text(f"pipeline:\n  auth_token_file: {tmp_path / 'missing-token'}\n")
    assert main(["--config", str(config), "receive", "--spool-dir", str(tmp_path / "spool")]) == 2
    assert "auth_token_file" in capsys.readouterr().err


@pytest.mark.real
def test_up_starts_clickhouse_migrates_and_receives(tmp_path):
    """The embedded default end to end: one command, spans in, rows out, clean stop on SIGTERM."""
    from tests.conftest import require_chdb

    require_chdb()
    ports_file = tmp_path / "ports.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "infersight", "up", "--data-dir", str(tmp_path / "data"), "--clickhouse-port", "0",
         "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0", "--spool-dir", str(tmp_path / "spool"),
         "--ports-file", str(ports_file)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ports_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        ports = json.loads(ports_file.read_text())
        req = request(spans=3)
        status, _, _ = post(f"http://127.0.0.1:{ports['http']}/v1/traces", req.SerializeToString())
        assert status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert "migration(s) applied" in output and "OTLP/HTTP on 127.0.0.1" in output
    # the data outlives the process: open the same folder again and find the spans
    from infersight.pipelines.clickhouse_server import ClickHouseServer

    with ClickHouseServer(tmp_path / "data") as server:
        client = server.client()
        stored = {r[0] for r in client.query("SELECT SpanId FROM default.otel_traces").result_rows}
        client.close()
    assert stored == span_ids(req)


@pytest.mark.real
def test_receive_into_the_in_process_engine(tmp_path):
    """``chdb://PATH``: the receiver owns the data folder and inserts in-process (run as a process, since
    an engine per process can hold only one folder)."""
    from tests.conftest import require_chdb

    require_chdb()
    dsn = f"chdb://{tmp_path / 'data'}"
    # cwd: the in-process engine keeps caches (e.g. Protobuf schemas) in its working directory.
    migrate = subprocess.run([sys.executable, "-m", "infersight", "db", "migrate", "--dsn", dsn],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert migrate.returncode == 0, migrate.stderr
    ports_file = tmp_path / "ports.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "infersight", "receive", "--dsn", dsn, "--otlp-http", "127.0.0.1:0",
         "--otlp-grpc", "127.0.0.1:0", "--spool-dir", str(tmp_path / "spool"), "--ports-file", str(ports_file)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not ports_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        req = request(spans=4, tokens=3)
        port = json.loads(ports_file.read_text())["http"]
        assert post(f"http://127.0.0.1:{port}/v1/traces", req.SerializeToString())[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    from infersight.pipelines.clickhouse_server import ClickHouseServer

    with ClickHouseServer(tmp_path / "data") as server:
        client = server.client()
        stored = {r[0] for r in client.query("SELECT SpanId FROM default.otel_traces").result_rows}
        tokens = client.query("SELECT count() FROM default.llm_token_events").result_rows[0][0]
        client.close()
    assert stored == span_ids(req) and tokens == 12


def test_the_sink_follows_the_parsed_dsn_scheme(tmp_path):
    """The scheme is read by infersight.dsn (case-insensitively), not sniffed from the text."""
    from infersight.pipelines.receiver.sink import ClickHouseSink, InProcessSink, make_sink

    assert type(make_sink(f"CHDB://{tmp_path}")) is InProcessSink
    assert type(make_sink("HTTP://127.0.0.1:8123/default")) is ClickHouseSink
    with pytest.raises(ValueError, match="clickhouse.dsn: .*scheme 'foo'"):
        make_sink("foo://bar")

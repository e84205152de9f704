"""``infersight traces ...`` end to end: real ClickHouse, the constructed incident, every output format."""

from __future__ import annotations

import csv
import io
import json

import pytest

from infersight.cli import main
from tests.pipelines import incident_data


@pytest.fixture(scope="module")
def store(clickhouse_server):
    _client, database, data, _ = incident_data.shared(clickhouse_server)
    return f"{clickhouse_server.url}/{database}", data


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def window(data) -> list[str]:
    return ["--from", data.t0.isoformat() + "Z", "--to", data.end.isoformat() + "+00:00"]


def test_slowest_in_every_format(store, capsys):
    dsn, data = store
    code, out, _ = run(capsys, "traces", "slowest", "--dsn", dsn, *window(data), "--limit", "3")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["trace_id", "started", "service"] and len(lines) == 5
    assert lines[2].startswith(data.trace_id("long-prefill"))
    code, out, _ = run(capsys, "traces", "slowest", "--dsn", dsn, *window(data), "--by", "gap", "--format", "json")
    rows = json.loads(out)
    assert {rows[0]["trace_id"], rows[1]["trace_id"]} == {data.trace_id("victim-1"), data.trace_id("victim-2")}
    code, out, _ = run(capsys, "traces", "slowest", "--dsn", dsn, *window(data), "--pool", "canary",
                       "--service", "gateway", "--limit", "100", "--format", "csv")
    assert code == 0 and len(list(csv.DictReader(io.StringIO(out)))) == 20


def test_since_window(store, capsys):
    dsn, data = store
    code, out, _ = run(capsys, "traces", "slowest", "--dsn", dsn, "--since", "2h", "--format", "json")
    assert code == 0 and json.loads(out)[0]["trace_id"] == data.trace_id("long-prefill")
    code, out, _ = run(capsys, "traces", "slowest", "--dsn", dsn, "--since", "1m")
    assert code == 0 and out.strip() == "(no rows)"


def test_show_a_trace(store, capsys):
    dsn, data = store
    code, out, _ = run(capsys, "traces", "show", data.trace_id("victim-1"), "--dsn", dsn)
    assert code == 0
    assert "\n  gateway.route " in out and "\n    chat llama-3-70b" in out and "\n      engine.decode" in out
    assert "token timeline: 50 tokens" in out and "3,000" in out
    code, out, _ = run(capsys, "traces", "show", data.trace_id("victim-1").upper(), "--dsn", dsn, "--format", "json")
    body = json.loads(out)
    assert len(body["tokens"]) == 50 and body["stalls"][0]["gap_ms"] == 3000.0 and body["spans"][0]["depth"] == 0


@pytest.mark.parametrize(("trace_id", "message"), [
    ("0" * 32, "no trace 00000000000000000000000000000000"),
    ("not-a-trace", "is not a trace id"),
    ("' OR 1=1 --", "is not a trace id"),
])
def test_show_bad_ids(store, capsys, trace_id, message):
    dsn, _ = store
    code, out, err = run(capsys, "traces", "show", trace_id, "--dsn", dsn)
    assert code == 1 and message in err and "Traceback" not in err and out == ""


def test_stalls_neighbors_retries(store, capsys):
    dsn, data = store
    code, out, _ = run(capsys, "traces", "stalls", data.trace_id("victim-2"), "--dsn", dsn, "--top", "1",
                       "--format", "json")
    assert code == 0 and json.loads(out)[0]["gap_ms"] == 3000.0
    code, out, _ = run(capsys, "traces", "stalls", "--dsn", dsn, *window(data), "--min-gap-ms", "1000",
                       "--format", "json")
    assert [(r["instance"], r["requests"]) for r in json.loads(out)] == [("i-2", 2)]
    code, out, err = run(capsys, "traces", "stalls", "0" * 32, "--dsn", dsn)
    assert code == 1 and "no token timeline" in err
    at = data.stall_at.isoformat() + "Z"
    code, out, _ = run(capsys, "traces", "neighbors", "--dsn", dsn, "--instance", "i-2", "--at", at, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["phase"], r["prompt_tokens"]) for r in rows][0] == ("prefill", "32000") and len(rows) == 3
    code, out, _ = run(capsys, "traces", "retries", "--dsn", dsn, *window(data), "--format", "json")
    chain = [(r["attempt"], r["instance"], r["gap_ms"]) for r in json.loads(out)]
    assert chain == [(0, "i-2", None), (1, "i-1", 400.0)]


def test_percentiles_and_compare(store, capsys):
    dsn, data = store
    code, out, _ = run(capsys, "traces", "percentiles", "--dsn", dsn, *window(data), "--by", "pool",
                       "--service", "gateway", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 20 and "ttft" not in rows[0] and {r["pool"] for r in rows} == {"stable", "canary"}
    code, out, _ = run(capsys, "traces", "compare", "--dsn", dsn, *window(data), "--service", "gateway")
    assert code == 0 and "canary" in out and "0.1" in out
    code, out, _ = run(capsys, "traces", "compare", "--dsn", dsn, *window(data), "--service", "gateway",
                       "--pools", "canary", "--format", "json")
    assert [(r["pool"], r["error_rate"]) for r in json.loads(out)] == [("canary", 0.1)]


def test_hostile_filters_via_cli(store, capsys):
    dsn, data = store
    for flag in ("--instance", "--pool", "--model", "--strategy", "--status", "--service"):
        code, out, _ = run(capsys, "traces", "slowest", "--dsn", dsn, *window(data), flag, "x' OR '1'='1")
        assert code == 0 and out.strip() == "(no rows)", flag
    code, out, _ = run(capsys, "traces", "neighbors", "--dsn", dsn, "--instance", "i-2' OR 1=1 --",
                       "--at", data.stall_at.isoformat())
    assert code == 0 and out.strip() == "(no rows)"


@pytest.mark.parametrize(("flags", "message"), [
    (["--since", "5 minutes"], "is not a duration"),
    (["--from", "yesterday"], "is not an ISO 8601 time"),
    (["--from", "2026-03-01T10:00Z", "--to", "2026-03-01T09:00Z"], "empty or reversed"),
    (["--since", "1h", "--from", "2026-03-01T10:00Z"], "either --since or --from/--to"),
    (["--to", "2026-03-01T10:00Z"], "--to needs --from"),
    (["--since", "90d"], "keep it under 31 days"),
])
def test_bad_windows(store, capsys, flags, message):
    dsn, _ = store
    code, _, err = run(capsys, "traces", "slowest", "--dsn", dsn, *flags)
    assert code == 1 and message in err and "Traceback" not in err


def test_unreachable_store_and_missing_schema(clickhouse_server, clickhouse_database, capsys):
    code, _, err = run(capsys, "traces", "slowest", "--dsn", "http://127.0.0.1:9/x")
    assert code == 1 and "cannot reach ClickHouse" in err and "Traceback" not in err
    code, _, err = run(capsys, "traces", "slowest", "--dsn", f"{clickhouse_server.url}/{clickhouse_database}")
    assert code == 1 and "infersight db migrate" in err and "Traceback" not in err


def test_bad_numbers_are_usage_errors(store, capsys):
    dsn, _ = store
    with pytest.raises(SystemExit) as exit_info:
        main(["traces", "slowest", "--dsn", dsn, "--limit", "0"])
    assert exit_info.value.code == 2 and "positive whole number" in capsys.readouterr().err

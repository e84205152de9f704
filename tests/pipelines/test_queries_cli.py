"""``infersight traces ...`` end to end: real ClickHouse, the constructed incident, every output format."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest

from infersight.cli import main
from tests.pipelines import incident_data


@pytest.fixture(scope="module")
def store(clickhouse_server):
    _client, database, data, _ = incident_data.shared(clickhouse_server)
    return clickhouse_server.dsn(database, "reader"), data


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
    # the router's candidates read as words on one line, not as the JSON they are stored as
    assert "least_conn cache=0.64: i-1 (score 0.5); i-2 (score 0.5); i-3 (score 0.5)" in out
    assert '"instance"' not in out
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
    examples = json.loads(out)[0]["example_traces"]
    code, out, _ = run(capsys, "traces", "stalls", "--dsn", dsn, *window(data), "--min-gap-ms", "1000")
    assert code == 0 and ", ".join(examples) in out and "['" not in out  # a list as words, not Python's repr
    assert f"{data.stall_at:%Y-%m-%d %H:%M:%S}Z" in out  # clock times say they are UTC
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
    assert "least_conn" in out and "busiest_instance_share" in out and "slowest_instance_ttft_p99_ms" in out
    code, out, _ = run(capsys, "traces", "compare", "--dsn", dsn, *window(data), "--service", "gateway",
                       "--pools", "canary", "--format", "json")
    assert [(r["pool"], r["error_rate"]) for r in json.loads(out)] == [("canary", 0.1)]


def test_hostile_filters_via_cli(store, capsys):
    """Injection attempts match nothing and say so; no row leaks out."""
    dsn, data = store
    hostile = "x' OR '1'='1"
    for flag in ("--instance", "--pool", "--model", "--strategy", "--service"):
        code, out, err = run(capsys, "traces", "slowest", "--dsn", dsn, *window(data), flag, hostile)
        assert code == 1 and out == "" and f"{flag[2:]} {hostile!r}" in err and "Traceback" not in err, flag
    with pytest.raises(SystemExit) as exit_info:
        main(["traces", "slowest", "--dsn", dsn, *window(data), "--status", hostile])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err
    code, out, err = run(capsys, "traces", "neighbors", "--dsn", dsn, "--instance", "i-2' OR 1=1 --",
                         "--at", data.stall_at.isoformat())
    assert code == 1 and out == "" and "no requests with instance" in err


def test_status_takes_the_outcomes_the_tracer_writes(store, capsys):
    from infersight.attributes import Outcome

    dsn, data = store
    with pytest.raises(SystemExit) as exit_info:
        main(["traces", "slowest", "--dsn", dsn, *window(data), "--status", "failed"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "invalid choice: 'failed'" in err
    assert all(repr(outcome.value) in err for outcome in Outcome)
    code, out, _ = run(capsys, "traces", "slowest", "--dsn", dsn, *window(data), "--status", "error",
                       "--service", "gateway", "--format", "json")
    assert code == 0 and {r["outcome"] for r in json.loads(out)} == {"error"} and len(json.loads(out)) == 2


def test_unknown_filter_values_name_what_the_window_holds(store, capsys):
    dsn, data = store
    code, out, err = run(capsys, "traces", "compare", "--dsn", dsn, *window(data), "--pools", "canary,nosuch")
    assert code == 1 and out == ""
    assert "no requests with pool 'nosuch'" in err and "pools with requests then: canary, stable" in err
    code, out, err = run(capsys, "traces", "percentiles", "--dsn", dsn, *window(data), "--instance", "i-9")
    assert code == 1 and "instances with requests then: i-1, i-2, i-3" in err
    quiet = data.t0 - dt.timedelta(hours=2)
    code, out, err = run(capsys, "traces", "slowest", "--dsn", dsn, "--from", quiet.isoformat(), "--to",
                         (quiet + dt.timedelta(minutes=10)).isoformat(), "--pool", "canary")
    assert code == 1 and "no requests at all in that window" in err
    # a known value with nothing to show is an answer, not an error
    code, out, _ = run(capsys, "traces", "slowest", "--dsn", dsn, *window(data), "--pool", "canary",
                       "--status", "timeout")
    assert code == 0 and out.strip() == "(no rows)"


def test_retry_status_is_plain_words(store, capsys):
    dsn, data = store
    code, out, _ = run(capsys, "traces", "retries", "--dsn", dsn, *window(data))
    assert code == 0 and "Unset" not in out and "Error" not in out
    code, out, _ = run(capsys, "traces", "retries", "--dsn", dsn, *window(data), "--format", "json")
    assert [(r["status"], r["error"]) for r in json.loads(out)] == [("error", "timeout"), ("ok", None)]
    code, out, _ = run(capsys, "traces", "show", data.trace_id("retried"), "--dsn", dsn)
    assert code == 0 and "Unset" not in out and " Ok " not in out


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
    code, _, err = run(capsys, "traces", "slowest", "--dsn", clickhouse_server.dsn(clickhouse_database, "reader"))
    assert code == 1 and "infersight db migrate" in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "message"), [
    (["traces", "slowest", "--limit", "0"], "'0' is out of range; from 1 to 10000 rows"),
    (["traces", "slowest", "--limit", "99999999999"], "out of range; from 1 to 10000 rows"),
    (["traces", "slowest", "--by", "latency"], "invalid choice: 'latency'"),
    (["traces", "stalls", "--min-gap-ms", "-5"], "out of range"),
    (["traces", "stalls", "--min-gap-ms", "nan"], "out of range"),
    (["traces", "stalls", "--top", "x"], "invalid int value: 'x'"),
    (["traces", "retries", "--min-attempts", "0"], "out of range; from 1 to 1000 attempts"),
    (["traces", "percentiles", "--metric", "ttfb"], "invalid choice: 'ttfb'"),
    (["incident", "report", "--out", "r", "--worst", "500"], "out of range; from 1 to 20 timelines"),
])
def test_bad_numbers_and_choices_are_usage_errors(store, capsys, argv, message):
    dsn, _ = store
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--dsn", dsn])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_bad_lookback(store, capsys):
    dsn, data = store
    code, _, err = run(capsys, "traces", "neighbors", "--dsn", dsn, "--instance", "i-2", "--at",
                       data.stall_at.isoformat(), "--lookback", "0s")
    assert code == 1 and "--lookback 0s is out of range" in err

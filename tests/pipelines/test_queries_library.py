"""Each post-incident query returns the known answer for the constructed incident (incident_data.py)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from infersight.pipelines.queries import library as q
from tests.pipelines import incident_data


@pytest.fixture(scope="module")
def incident(clickhouse_server):
    """The constructed incident, sent through the real receiver once per session (read-only here)."""
    client, database, data, _ = incident_data.shared(clickhouse_server)
    return client, database, data


def test_slowest_by_ttft_one_row_per_trace(incident):
    client, db, data = incident
    rows = q.slowest(client, db, data.t0, data.end, by="ttft", limit=5)
    assert [r["trace_id"] for r in rows[:3]] == [data.trace_id(r) for r in ("long-prefill", "late-arrival", "retried")]
    assert rows[0]["ttft_ms"] == 3200.0 and rows[0]["instance"] == "i-2" and rows[0]["input_tokens"] == 32000
    assert len({r["trace_id"] for r in rows}) == len(rows) == 5
    assert all(r["ttft_ms"] == 300.0 and r["pool"] == "canary" for r in rows[3:])


def test_slowest_filters_and_e2e(incident):
    client, db, data = incident
    canary = q.slowest(client, db, data.t0, data.end, by="ttft", pool="canary", service="gateway", limit=100)
    assert len(canary) == 20 and {r["instance"] for r in canary} == {"i-3"}
    errors = q.slowest(client, db, data.t0, data.end, status="error", service="gateway")
    assert sorted(r["trace_id"] for r in errors) == sorted(data.trace_id(r) for r in ("bg-2", "bg-32"))
    by_e2e = q.slowest(client, db, data.t0, data.end, by="e2e", instance="i-2", limit=1)
    assert by_e2e[0]["trace_id"] == data.trace_id("victim-1")  # the 3 s stall made it the longest
    by_gap = q.slowest(client, db, data.t0, data.end, by="gap", limit=2)
    assert {r["trace_id"] for r in by_gap} == {data.trace_id("victim-1"), data.trace_id("victim-2")}
    assert [r["stall_at"] for r in by_gap] == [data.stall_at, data.stall_at] and by_gap[0]["max_gap_ms"] == 3000.0
    window = q.slowest(client, db, data.t0, data.t0 + dt.timedelta(minutes=1), service="gateway", limit=100)
    assert len(window) == 6  # one request every 10 s


def test_trace_span_tree_and_timeline(incident):
    client, db, data = incident
    trace = data.trace_id("retried")
    spans = q.trace_spans(client, db, trace)
    assert spans[0]["depth"] == 0 and spans[0]["service"] == "gateway" and spans[0]["outcome"] == "success"
    names = [(s["depth"], s["name"]) for s in spans]
    assert names[:5] == [(0, "chat llama-3-70b"), (1, "gateway.queue"), (1, "gateway.route"), (1, "upstream"),
                         (2, "chat llama-3-70b")]
    upstreams = [s for s in spans if s["name"] == "upstream"]
    assert [(s["attempt"], s["instance"], s["status"]) for s in upstreams] == [(0, "i-2", "error"), (1, "i-1", "ok")]
    route = next(s for s in spans if s["name"] == "gateway.route")
    assert '"instance":"i-3"' in route["candidates"] and route["strategy"] == "least_conn"
    tokens = q.token_timeline(client, db, trace)
    assert [t["token_index"] for t in tokens] == list(range(20)) and tokens[0]["offset_ms"] == 2560.0


def test_unknown_trace(incident):
    client, db, _ = incident
    with pytest.raises(q.TraceNotFound):
        q.trace_spans(client, db, "0" * 32)
    assert q.token_timeline(client, db, "0" * 32) == []
    with pytest.raises(q.TraceNotFound):
        q.trace_with_timelines(client, db, "0" * 32)


def test_trace_with_timelines_reads_both_side_by_side(incident):
    """The two reads run concurrently on one client (no session) and give what each gives alone."""
    client, db, data = incident
    for name in ("retried", "victim-1", "bg-2"):
        trace = data.trace_id(name)
        spans, timelines = q.trace_with_timelines(client, db, trace)
        assert spans == q.trace_spans(client, db, trace)
        assert q.timeline_tokens(timelines) == q.token_timeline(client, db, trace)
    assert q.timeline_stalls(q.trace_with_timelines(client, db, data.trace_id("victim-1"))[1], top=2) == \
        q.trace_stalls(client, db, data.trace_id("victim-1"), top=2)


def test_trace_with_timelines_over_a_session(incident, clickhouse_server):
    """A client with a session cannot run two queries at once: the reads then go one after the other."""
    _, db, data = incident
    session = clickhouse_server.client(db, session_id="one-session-only")
    spans, timelines = q.trace_with_timelines(session, db, data.trace_id("retried"))
    assert spans and len(q.timeline_tokens(timelines)) == 20


def test_stalls_of_one_trace(incident):
    client, db, data = incident
    stalls = q.trace_stalls(client, db, data.trace_id("victim-1"), top=2)
    assert stalls[0]["gap_ms"] == 3000.0 and stalls[0]["token_index"] == 35
    assert stalls[0]["gap_started"] == data.stall_at and stalls[0]["instance"] == "i-2"
    assert stalls[1]["gap_ms"] == 25.0


def test_stalls_in_a_window(incident):
    client, db, data = incident
    rows = q.window_stalls(client, db, data.t0, data.end, min_gap_ms=1000)
    assert len(rows) == 1
    row = rows[0]
    assert (row["instance"], row["minute"], row["requests"], row["max_gap_ms"]) == ("i-2", data.stall_at, 2, 3000.0)
    assert row["first_stall_at"] == data.stall_at
    assert sorted(row["example_traces"]) == sorted(data.trace_id(r) for r in ("victim-1", "victim-2"))
    assert q.window_stalls(client, db, data.t0, data.end, min_gap_ms=3000.5) == []


def test_neighbors_at_the_stall(incident):
    client, db, data = incident
    rows = q.neighbors(client, db, "i-2", data.stall_at)
    found = {r["trace_id"]: r for r in rows}
    assert set(found) == {data.trace_id(r) for r in ("long-prefill", "victim-1", "victim-2")}
    prefill = found[data.trace_id("long-prefill")]
    assert (prefill["phase"], prefill["prompt_tokens"], prefill["prefix_cached"]) == ("prefill", 32000, False)
    assert rows[0]["trace_id"] == data.trace_id("long-prefill")  # prefill first: the likely culprit
    assert all(r["phase"] == "decode" and r["prefix_cached"] for r in rows[1:])
    during = q.neighbors(client, db, "i-2", data.stall_at + dt.timedelta(seconds=1))
    late = next(r for r in during if r["trace_id"] == data.trace_id("late-arrival"))
    assert late["phase"] == q.Phase.ENGINE_QUEUE  # waiting in i-2's own queue (its engine.queue span), not prefill
    assert late["prefill_from_ms"] == 2500.0  # its prefill began after 2.5 s in that queue (from its engine span)
    # The gateway's span alone runs from the gateway's start: the engine's phase spans of the same trace
    # still say where each request was
    gateway = {r["trace_id"]: r for r in q.neighbors(client, db, "i-2", data.stall_at + dt.timedelta(seconds=1),
                                                     service="gateway")}
    assert gateway[data.trace_id("late-arrival")]["phase"] == q.Phase.ENGINE_QUEUE
    assert gateway[data.trace_id("long-prefill")]["phase"] == q.Phase.PREFILL
    assert q.neighbors(client, db, "i-9", data.stall_at) == []


def test_retry_chains(incident):
    client, db, data = incident
    rows = q.retries(client, db, data.t0, data.end)
    assert [(r["trace_id"], r["attempt"], r["instance"], r["status"], r["error"]) for r in rows] == [
        (data.trace_id("retried"), 0, "i-2", "error", "timeout"), (data.trace_id("retried"), 1, "i-1", "ok", None)]
    assert rows[0]["gap_ms"] is None and rows[1]["gap_ms"] == 400.0 and rows[1]["backoff_ms"] == 400.0
    assert q.retries(client, db, data.t0, data.end, min_attempts=3) == []


def test_percentiles_per_minute_from_the_rollup(incident):
    client, db, data = incident
    rows = q.percentiles(client, db, data.t0, data.end, by="instance", service="gateway")
    by_key = {(r["minute"], r["instance"]): r for r in rows}
    stall_minute = by_key[(data.stall_at, "i-2")]
    assert stall_minute["requests"] == 3 and stall_minute["ttft_p50_ms"] == 150.0
    assert stall_minute["ttft_p99_ms"] > 2000  # the late arrival
    assert all(r["ttft_p95_ms"] == 300.0 for r in rows if r["instance"] == "i-3")
    assert sum(r["requests"] for r in rows) == 65
    pools = q.percentiles(client, db, data.t0, data.end, by="pool", service="gateway")
    assert {r["pool"] for r in pools} == {"stable", "canary"}
    tpot = q.percentiles(client, db, data.t0, data.t0 + dt.timedelta(minutes=1), metric="tpot", service="gateway")
    assert {r["tpot_p50_ms"] for r in tpot} == {25.0}  # one token every 25 ms before the incident


def test_canary_versus_stable(incident):
    client, db, data = incident
    rows = {r["pool"]: r for r in q.compare_pools(client, db, data.t0, data.end, service="gateway")}
    assert rows["canary"]["requests"] == 20 and rows["canary"]["error_rate"] == 0.1
    assert rows["canary"]["ttft_p50_ms"] == 300.0 and rows["stable"]["ttft_p50_ms"] == 150.0
    assert rows["stable"]["requests"] == 45 and rows["stable"]["error_rate"] == 0.0
    assert rows["stable"]["tokens_per_s"] > 0
    # How evenly each pool spread its requests, and its slowest instance (a hot spot's signs).
    served = Counter(r.instance for r in data.requests.values())
    stable = [served[i] for i, pool in incident_data.POOLS.items() if pool == "stable"]
    assert rows["stable"]["strategy"] == "least_conn" and rows["stable"]["instances"] == len(stable) == 2
    assert rows["stable"]["busiest_instance_share"] == round(max(stable) / sum(stable), 3)
    assert rows["canary"]["instances"] == 1 and rows["canary"]["busiest_instance_share"] == 1.0
    # i-2's late arrival and long prefill are the stable pool's slowest first tokens
    i2 = q.percentiles(client, db, data.t0, data.end, by="instance", service="gateway")
    assert rows["stable"]["slowest_instance_ttft_p99_ms"] >= rows["stable"]["ttft_p99_ms"] > 2000
    assert rows["canary"]["slowest_instance_ttft_p99_ms"] == rows["canary"]["ttft_p99_ms"]
    assert i2  # the per-instance rollup the comparison reads has rows
    only = q.compare_pools(client, db, data.t0, data.end, service="gateway", pools=("canary",))
    assert [r["pool"] for r in only] == ["canary"]


def test_dimension_values_of_a_window(incident):
    client, db, data = incident
    assert q.dimension_values(client, db, data.t0, data.end, "pool") == ["canary", "stable"]
    assert q.dimension_values(client, db, data.t0, data.end, "instance") == ["i-1", "i-2", "i-3"]
    later = data.end + dt.timedelta(hours=1)
    assert q.dimension_values(client, db, later, later + dt.timedelta(minutes=5), "pool") == []

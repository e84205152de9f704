"""SQL-injection strings in every user-supplied argument are treated as values: no rows, no harm."""

from __future__ import annotations

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from infersight.pipelines.queries import library as q
from tests.pipelines import incident_data

HOSTILE = [
    "' OR 1=1 --",
    "i-2' OR '1'='1",
    "x'); DROP TABLE otel_traces; --",
    "\\' OR 1=1 #",
    "i-2\x00' OR 1=1",
    "{db:Identifier}",
    "i-2` UNION ALL SELECT * FROM system.tables --",
]


@pytest.fixture(scope="module")
def loaded(clickhouse_server):
    # Every test checks afterwards that no row was lost, so harm would show.
    return incident_data.shared(clickhouse_server)


def _intact(client, db: str, spans: int) -> None:
    assert client.query(f"SELECT count() FROM `{db}`.otel_traces").result_rows == [(spans,)]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_filters_are_values(loaded, hostile):
    client, db, data, spans = loaded
    start, end = data.t0, data.end
    for name in ("model", "instance", "pool", "strategy", "status", "service"):
        assert q.slowest(client, db, start, end, **{name: hostile}) == [], name
        assert q.window_stalls(client, db, start, end, min_gap_ms=0, **{name: hostile}) == [], name
    assert q.neighbors(client, db, hostile, data.stall_at) == []
    assert q.neighbors(client, db, "i-2", data.stall_at, service=hostile) == []
    assert q.percentiles(client, db, start, end, service=hostile) == []
    assert q.percentiles(client, db, start, end, pool=hostile) == []
    assert q.percentiles(client, db, start, end, instance=hostile) == []
    assert q.compare_pools(client, db, start, end, service=hostile) == []
    assert q.compare_pools(client, db, start, end, pools=(hostile,)) == []
    with pytest.raises(q.TraceNotFound):
        q.trace_spans(client, db, hostile)
    assert q.token_timeline(client, db, hostile) == []
    assert q.trace_stalls(client, db, hostile) == []
    _intact(client, db, spans)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_database_name_is_an_identifier(loaded, hostile):
    client, db, data, spans = loaded
    with pytest.raises(DatabaseError, match="UNKNOWN_DATABASE|does not exist|BAD_ARGUMENTS|SYNTAX_ERROR"):
        q.slowest(client, hostile, data.t0, data.end)
    _intact(client, db, spans)


def test_choices_are_whitelisted(loaded):
    client, db, data, _ = loaded
    with pytest.raises(KeyError):
        q.slowest(client, db, data.t0, data.end, by="TtftMs; DROP TABLE otel_traces")
    with pytest.raises(KeyError):
        q.percentiles(client, db, data.t0, data.end, by="Instance) --")
    with pytest.raises(KeyError):
        q.percentiles(client, db, data.t0, data.end, metric="TtftMs) FROM system.users --")

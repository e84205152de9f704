"""One trace's tokens are expanded in Python from the stored row (library.timeline_tokens); they must be
the rows the ``llm_token_events`` view (ClickHouse's JSONExtract + ARRAY JOIN) gives for the same
timelines, for well-formed text and for the odd text another SDK or a hostile client can store."""

from __future__ import annotations

import datetime as dt

import pytest

from infersight.pipelines.queries import library as q
from infersight.pipelines.schema.ddl import DEFAULT_TABLES as T

START = dt.datetime(2026, 12, 2, 9, 30, 0, 123456)
TEXTS = {
    "plain": "[391200,416200,441200,3441200,3466200]",
    "spaces": " [ 0 , 25000 ,\n50000 ] ",
    "unordered": "[500,100,900]",
    "floats": "[1.5,2500.9,1e3]",
    "mixed": '[1,"a",3,"40",true,null,[2],{"k":1},-7,-2.5,"+5","5.","1e3","5.5",".5","0x10"," 5","-3",false]',
    "none reads": '["a",null,-1,[1],{}]',
    "past uint64 in a string": '["18446744073709551616",2]',
    "past uint64 as a float": "[1e20,3]",
    "unparseable float": "[1e400,2]",
    "largest": "[18446744073709551615,1]",
    "too big": "[18446744073709551616,1]",
    "object": '{"a":1}',
    "not json": "nonsense",
    "truncated": "[1,2,",
    "nan": "[NaN,1]",
    "empty": "[]",
    "blank": "",
}


@pytest.fixture(scope="module")
def stored(clickhouse_server, tmp_path_factory):
    from infersight.pipelines.schema import migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    db = f"t_expansion_{id(tmp_path_factory) % 100000}"
    client = clickhouse_server.client()
    migrations.migrate(client, SchemaOptions(database=db))
    rows = [(f"trace-{i:02d}", f"span-{name}", "gateway", "m", f"i-{i}", START, text)
            for i, (name, text) in enumerate(TEXTS.items())]
    # Two timelines in one trace (a gateway's and an engine's), the engine's with a longer stall.
    rows += [("trace-two", "span-a", "gateway", "m", "i-1", START, "[100,200,5200,5300]"),
             ("trace-two", "span-b", "vllm", "m", "i-1", START, "[50,150,6150,6160,6170]")]
    client.insert(T.token_timelines, rows, database=db,
                  column_names=["TraceId", "SpanId", "ServiceName", "Model", "Instance", "Timestamp", "OffsetsUs"])
    yield client, db, sorted({r[0] for r in rows})
    client.command(f"DROP DATABASE IF EXISTS `{db}` SYNC")


def _view_tokens(client, db: str, trace: str) -> list[dict]:
    return list(client.query(
        "SELECT SpanId AS span_id, ServiceName AS service, Instance AS instance, TokenIndex AS token_index, "
        "Timestamp AS at, round(OffsetUs / 1000, 3) AS offset_ms, round(GapUs / 1000, 3) AS gap_ms "
        "FROM {db:Identifier}.{t:Identifier} WHERE TraceId = {trace:String} ORDER BY SpanId, TokenIndex",
        parameters={"db": db, "t": T.token_events, "trace": trace}).named_results())


def test_tokens_match_the_view(stored):
    client, db, traces = stored
    seen = 0
    for trace in traces:
        expected = _view_tokens(client, db, trace)
        got = q.token_timeline(client, db, trace)
        assert got == expected, trace
        seen += len(got)
    assert seen > 20  # the well-formed texts did give tokens


def test_an_offset_past_any_date_is_cut_to_a_year(stored):
    """The view's addMicroseconds overflowed on it (DECIMAL_OVERFLOW failed the whole query); now both
    the view and the library put the token a year after the request's start, with its offset as sent."""
    client, db, _ = stored
    trace = f"trace-{list(TEXTS).index('largest'):02d}"
    tokens = q.token_timeline(client, db, trace)
    assert tokens == _view_tokens(client, db, trace)
    assert [t["at"] for t in tokens] == [START + dt.timedelta(days=365), START + dt.timedelta(microseconds=1)]
    assert tokens[0]["offset_ms"] == round(18446744073709551615 / 1000, 3)
    assert q.trace_stalls(client, db, trace)[0]["token_index"] == 1


def test_stalls_match_the_sql_over_the_view(stored):
    client, db, _ = stored
    expected = list(client.query(
        "SELECT Instance AS instance, TokenIndex AS token_index, round(GapUs / 1000, 1) AS gap_ms, "
        "subtractMicroseconds(Timestamp, GapUs) AS gap_started, round((OffsetUs - GapUs) / 1000, 1) AS gap_offset_ms "
        "FROM {db:Identifier}.{t:Identifier} WHERE TraceId = 'trace-two' AND TokenIndex > 0 "
        "ORDER BY GapUs DESC, TokenIndex LIMIT 1 BY TokenIndex LIMIT 3",
        parameters={"db": db, "t": T.token_events}).named_results())
    got = q.trace_stalls(client, db, "trace-two", top=3)
    assert got == expected
    assert got[0]["gap_ms"] == 6.0 and got[0]["token_index"] == 2  # the engine's 6 ms gap, not the gateway's 5


def test_offsets_of_odd_text():
    assert q.timeline_offsets(TEXTS["plain"]) == [391200, 416200, 441200, 3441200, 3466200]
    assert q.timeline_offsets(TEXTS["too big"]) == [0, 1] and q.timeline_offsets(TEXTS["not json"]) == []
    assert q.timeline_offsets(TEXTS["mixed"])[:5] == [1, 0, 3, 40, 1] and q.timeline_offsets(TEXTS["none reads"]) == []

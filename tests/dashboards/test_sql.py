"""Turning a library query into panel SQL: window parameters become macros, the rest safe literals."""

from __future__ import annotations

import pytest

from infersight.dashboards.sql import grafana_sql


def query_with(sql: str, **fixed):
    """A query function shaped like the library's: (client, db, start, end, **options)."""

    def query(client, db, start, end, **options):
        return client.query(sql, parameters={"db": db, "start": start, "end": end, **fixed, **options}).named_results()

    return query


def test_window_becomes_macros_and_values_literals():
    sql = ("SELECT 1 FROM {db:Identifier}.t WHERE ts >= {start:DateTime64(9)} AND ts < {end:DateTime64(9)} "
           "AND m >= toStartOfMinute({start:DateTime}) AND name = {name:String} AND n < {limit:UInt32} "
           "AND has({pools:Array(String)}, p) AND g > {gap:Float64}")
    text = grafana_sql(query_with(sql), "we`ird", name="it's \\ odd", limit=20, pools=["canary"], gap=0.5)
    assert text == ("SELECT 1 FROM `we\\`ird`.t WHERE ts >= $__fromTime_ms AND ts < $__toTime_ms "
                    "AND m >= toStartOfMinute($__fromTime) AND name = 'it\\'s \\\\ odd' AND n < 20 "
                    "AND has(['canary'], p) AND g > 0.5")


def test_a_parameter_without_a_rendering_is_refused():
    with pytest.raises(ValueError, match="no Grafana rendering"):
        grafana_sql(query_with("SELECT {at:DateTime64(9)}", at="2026-01-01"), "db")
    with pytest.raises(ValueError, match="no Grafana macro"):
        grafana_sql(query_with("SELECT {start:Date}"), "db")


def test_a_query_function_that_sends_nothing_is_refused():
    with pytest.raises(RuntimeError, match="sent no query"):
        grafana_sql(lambda client, db, start, end: [], "db")

"""The post-incident questions as parameterized ClickHouse queries.

Every value a user supplies -- database, trace id, instance, pool, model, times, thresholds -- is
bound as a server-side parameter (``{name:Type}``, the database as ``{db:Identifier}``); the SQL
text is constant, so no input can change what a query does. Choices between columns (sort by TTFT
or e2e, group by instance or pool) pick from fixed fragments, never from user text; table names come
from the schema module (:class:`infersight.pipelines.schema.ddl.Tables`, ``tables=``, the schema's own
names by default; ``clickhouse.tables`` in the config renames them), never typed here, and are bound
as identifiers like the database.

A trace holds one *request span* per service that saw the request (gateway, proxy, engine); a
query that lists requests keeps one row per trace (``LIMIT 1 BY TraceId``) unless a service is given.
Each function returns a list of plain dicts, ready for :func:`infersight.commands.output.render`.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import StrEnum
from typing import Any

from infersight import attributes as attr
from infersight.pipelines.schema.ddl import DEFAULT_TABLES, MAX_OFFSET_US, QUANTILE_LEVELS, Tables

SORT_COLUMNS = {"ttft": "TtftMs", "e2e": "Duration", "gap": "TokenGapMaxMs"}
GROUP_COLUMNS = {"instance": "Instance", "pool": "Pool", "model": "Model", "strategy": "Strategy"}
PERCENTILE_METRICS = {"ttft": "TtftMs", "tpot": "TpotMs", "e2e": "E2eMs"}

# A span's status as people read it. OpenTelemetry's "Unset" means no error was recorded: an upstream
# attempt that worked ends Unset, so it reads "ok", never "Unset".
SPAN_STATUS = "if(StatusCode = 'Error', 'error', 'ok')"
# The dimensions a window can be filtered by, with the rollup column that lists their values.
DIMENSIONS = {"model": "Model", "instance": "Instance", "pool": "Pool", "strategy": "Strategy",
              "service": "ServiceName"}

# Optional filters: an empty parameter matches everything, so the SQL never changes shape.
REQUEST_FILTERS = """
    AND ({model:String} = '' OR Model = {model:String})
    AND ({instance:String} = '' OR Instance = {instance:String})
    AND ({pool:String} = '' OR Pool = {pool:String})
    AND ({strategy:String} = '' OR Strategy = {strategy:String})
    AND ({status:String} = '' OR Outcome = {status:String})
    AND ({service:String} = '' OR ServiceName = {service:String})"""


# Values a client sent, made safe to move a timestamp by (ddl.MAX_OFFSET_US says why): a stall offset that
# is not a finite number of ms within a year reads NULL ("nan" or "1e30" failed the whole window's query),
# and a span's end is its start plus its duration cut to a year (a duration of 2^64 ns overflowed).
STALL_AT = ("if(isFinite(TokenStallOffsetMs) AND TokenStallOffsetMs >= 0 AND "
            f"TokenStallOffsetMs <= {MAX_OFFSET_US // 1000}, "
            "addMicroseconds(Timestamp, toInt64(TokenStallOffsetMs * 1000)), NULL)")
SPAN_END = f"addMicroseconds(Timestamp, least(intDiv(Duration, 1000), {MAX_OFFSET_US}))"


class Phase(StrEnum):
    """Where a request was at an instant, as :func:`neighbors` labels it."""

    GATEWAY_QUEUE = "gateway queue"
    ENGINE_QUEUE = "engine queue"
    PREFILL = "prefill"
    DECODE = "decode"
    # A gateway's span alone cannot tell the engine's queue from its prefill (no engine spans in the trace)
    AWAITING_FIRST_TOKEN = "awaiting first token"


class TraceNotFound(LookupError):
    """No span with this trace id (it may be older than the retention)."""


def _at(db: str, tables: Tables) -> dict[str, str]:
    """The database and table names, bound as identifiers like every other value."""
    return {"db": db, "t_traces": tables.traces, "t_trace_id_ts": tables.trace_id_ts,
            "t_timelines": tables.token_timelines, "t_requests_1m": tables.requests_1m}


def _rows(client, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    # Naive datetimes here mean UTC; marked so, clickhouse-connect converts them to the server's time zone.
    bound = {k: v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime) and v.tzinfo is None else v
             for k, v in params.items()}
    return list(client.query(sql, parameters=bound).named_results())


def _filters(model: str = "", instance: str = "", pool: str = "", strategy: str = "", status: str = "",
             service: str = "") -> dict[str, str]:
    return {"model": model or "", "instance": instance or "", "pool": pool or "", "strategy": strategy or "",
            "status": status or "", "service": service or ""}


def slowest(client, db: str, start: dt.datetime, end: dt.datetime, by: str = "ttft", limit: int = 20,
            tables: Tables = DEFAULT_TABLES, **filters: str) -> list[dict[str, Any]]:
    """The slowest requests in ``[start, end)`` by TTFT, e2e duration or longest gap, one row per trace.

    Two phases: rank only (TraceId, SpanId, sort key), then fetch the columns of the winners;
    sorting every column of a 10-minute window through ``LIMIT 1 BY`` took 4x longer.
    """
    order = SORT_COLUMNS[by]
    window = "Timestamp >= {start:DateTime64(9)} AND Timestamp < {end:DateTime64(9)}"
    sql = f"""
SELECT TraceId AS trace_id, Timestamp AS started, ServiceName AS service, Model AS model, Instance AS instance,
       Pool AS pool, Strategy AS strategy, Outcome AS outcome, round(TtftMs, 1) AS ttft_ms,
       round(Duration / 1e6, 1) AS e2e_ms, round(TokenGapMaxMs, 1) AS max_gap_ms,
       {STALL_AT} AS stall_at,
       InputTokens AS input_tokens, OutputTokens AS output_tokens
FROM {{db:Identifier}}.{{t_traces:Identifier}}
WHERE {window} AND (TraceId, SpanId) IN (
    SELECT TraceId, SpanId FROM {{db:Identifier}}.{{t_traces:Identifier}}
    WHERE {window} AND IsRequest {REQUEST_FILTERS}
    ORDER BY {order} DESC NULLS LAST, Timestamp
    LIMIT 1 BY TraceId
    LIMIT {{limit:UInt32}})
ORDER BY {order} DESC NULLS LAST, Timestamp"""
    return _rows(client, sql, {**_at(db, tables), "start": start, "end": end, "limit": limit, **_filters(**filters)})


def trace_spans(client, db: str, trace_id: str, tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """The span tree of one trace, depth-first, with the attributes that explain each step.

    The exporter's TraceId -> (Start, End) lookup bounds the time range in the same query, so the
    read prunes partitions and granules before the TraceId bloom filter is even consulted.

    Start and End are whole-second ``DateTime``; the bounds are turned into ``DateTime64(9)`` before
    they meet ``Timestamp``. Compared as ``DateTime``, the engine's part pruning reads the strict
    ``Timestamp < End + 1`` as ``Timestamp <= End`` in whole seconds and skips every unmerged part
    whose spans all fall in the trace's last second: the newest traces were "not found".

    The query returns the stored columns and the status; the few spans of a trace are sorted and their
    values rounded here. Rounding, ``nullIf`` and ``ORDER BY`` on the server cost a point read ~3 ms
    more of ClickHouse CPU (15.7-17.4 against 12.2-14.8 ms per query, benchmarks/README.md).
    """
    rows = _rows(client, f"""
WITH (SELECT (toDateTime64(min(Start), 9), toDateTime64(max(End), 9) + toIntervalSecond(1))
      FROM {{db:Identifier}}.{{t_trace_id_ts:Identifier}} WHERE TraceId = {{trace:String}}) AS span_range
SELECT {TRACE_SPAN_COLUMNS}
FROM {{db:Identifier}}.{{t_traces:Identifier}}
WHERE TraceId = {{trace:String}} AND Timestamp >= span_range.1 AND Timestamp < span_range.2""",
                 {**_at(db, tables), "trace": trace_id})
    if not rows:
        raise TraceNotFound(trace_id)
    return _tree_order(sorted((_trace_span(r) for r in rows), key=lambda r: (r["started"], r["span_id"])))


# A span of trace_spans: the stored column, under the name the CLI and the report use.
TRACE_SPAN_COLUMNS = ("SpanId AS span_id, ParentSpanId AS parent_id, ServiceName AS service, SpanName AS name, "
                      f"Timestamp AS started, Duration AS duration_ns, {SPAN_STATUS} AS status, Instance AS instance, "
                      "Pool AS pool, Outcome AS outcome, TtftMs AS ttft_ms, RetryAttempt AS attempt, "
                      "Strategy AS strategy, RoutingCandidates AS candidates, PrefixCacheRatio AS prefix_cache_ratio, "
                      "InputTokens AS input_tokens, CachedInputTokens AS cached_input_tokens, "
                      "OutputTokens AS output_tokens")
_ZERO_IS_UNKNOWN = ("input_tokens", "cached_input_tokens", "output_tokens")  # 0 there means "not reported"


def _trace_span(row: dict[str, Any]) -> dict[str, Any]:
    """One span as people read it: its duration in ms, and token counts of 0 as not reported."""
    span = dict(row)
    span["duration_ms"] = _round(span.pop("duration_ns") / 1e6, 2)
    for key in _ZERO_IS_UNKNOWN:
        span[key] = span[key] or None
    return span


def _tree_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Depth-first order with a ``depth`` field; spans whose parent is missing become roots."""
    ids = {r["span_id"] for r in rows}
    children: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        parent = row["parent_id"] if row["parent_id"] in ids else ""
        children.setdefault(parent, []).append(row)
    ordered: list[dict[str, Any]] = []
    trace_start = min((r["started"] for r in rows), default=None)

    def visit(parent: str, depth: int) -> None:
        for row in children.get(parent, []):
            row["depth"] = depth
            row["start_ms"] = round((row["started"] - trace_start).total_seconds() * 1000, 2)
            ordered.append(row)
            visit(row["span_id"], depth + 1)

    visit("", 0)
    return ordered


# One trace's kept timelines as stored, one row per request span (its offsets as JSON text). They are
# expanded into tokens here: expanding them on the server (JSONExtract and ARRAY JOIN, the SELECT of
# llm_token_events) cost a point read ~6 ms more of ClickHouse CPU than the row itself, and the client
# then decoded one row per token instead of one per timeline (benchmarks/README.md).
TRACE_TIMELINES = """
SELECT SpanId AS span_id, ServiceName AS service, Instance AS instance, Timestamp AS start, OffsetsUs AS offsets
FROM {db:Identifier}.{t_timelines:Identifier}
WHERE TraceId = {trace:String}"""


def trace_timelines(client, db: str, trace_id: str, tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """The kept timelines of a trace as stored: ``span_id``, ``service``, ``instance``, ``start`` and
    ``offsets`` (the JSON text of ``llm.token.offsets_us``); empty when none was sampled."""
    return _rows(client, TRACE_TIMELINES, {**_at(db, tables), "trace": trace_id})


def trace_with_timelines(client, db: str, trace_id: str,
                         tables: Tables = DEFAULT_TABLES) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`trace_spans` and :func:`trace_timelines` of one trace (raises :class:`TraceNotFound`).

    Over HTTP the two point reads run side by side: each costs the server a few ms of CPU whatever it
    reads, so on two or more cores the answer takes the longer of them, not their sum
    (benchmarks/README.md). One after the other over a client with a session (ClickHouse refuses two
    queries at once in one session; ours have none, ``CLIENT_DEFAULTS``) or in-process chdb.
    """
    from concurrent.futures import ThreadPoolExecutor

    from clickhouse_connect.driver.httpclient import HttpClient

    if not isinstance(client, HttpClient) or client.get_client_setting("session_id"):
        return trace_spans(client, db, trace_id, tables=tables), trace_timelines(client, db, trace_id, tables=tables)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-timelines") as pool:
        timelines = pool.submit(trace_timelines, client, db, trace_id, tables=tables)
        return trace_spans(client, db, trace_id, tables=tables), timelines.result()


def token_timeline(client, db: str, trace_id: str, tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """Every kept token of a trace (empty when its timeline was not sampled), as ``llm_token_events``
    has it: ``span_id``, ``service``, ``instance``, ``token_index``, ``at``, ``offset_ms``, ``gap_ms``."""
    return timeline_tokens(trace_timelines(client, db, trace_id, tables=tables))


def trace_stalls(client, db: str, trace_id: str, top: int = 5, tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """The longest inter-token gaps of one trace and when each started."""
    return timeline_stalls(trace_timelines(client, db, trace_id, tables=tables), top)


def timeline_tokens(timelines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tokens of :func:`trace_timelines` rows, ordered by span and token index: the rows
    ``llm_token_events`` gives for the same timelines (offsets read by :func:`timeline_offsets`)."""
    return [{"span_id": row["span_id"], "service": row["service"], "instance": row["instance"], "token_index": index,
             "at": _after(row["start"], offset), "offset_ms": _round(offset / 1000, 3), "gap_ms": _round(gap / 1000, 3)}
            for row, index, offset, gap in _tokens(timelines)]


def timeline_stalls(timelines: list[dict[str, Any]], top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` longest gaps in :func:`trace_timelines` rows, longest first, one per token index (the
    gateway's and the engine's timelines of one request see the same stall)."""
    best: dict[int, tuple[dict[str, Any], int, int, int]] = {}
    for token in _tokens(timelines):
        index, gap = token[1], token[3]
        if index > 0 and (index not in best or gap > best[index][3]):
            best[index] = token
    ranked = sorted(best.values(), key=lambda t: (-t[3], t[1]))[:top]
    return [{"instance": row["instance"], "token_index": index, "gap_ms": _round(gap / 1000, 1),
             "gap_started": _after(row["start"], offset - gap), "gap_offset_ms": _round((offset - gap) / 1000, 1)}
            for row, index, offset, gap in ranked]


def _tokens(timelines: list[dict[str, Any]]):
    """(row, token index, offset us, gap us) for every token, by span id and index (``llm_token_events``'
    TokenIndex, OffsetUs and GapUs: the first token's gap is 0)."""
    for row in sorted(timelines, key=lambda r: r["span_id"]):
        previous = None
        for index, offset in enumerate(timeline_offsets(row["offsets"])):
            # arrayDifference of UInt64 wraps in Int64, as here (only an absurd offset ever wraps)
            yield row, index, offset, 0 if previous is None else (offset - previous + _INT64) % _UINT64 - _INT64
            previous = offset


_UINT64, _INT64 = 1 << 64, 1 << 63
_NUMBER_TEXT = re.compile(r"\+?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")


def timeline_offsets(text: str) -> list[int]:
    """Offsets (us from the request start) from a timeline's JSON text, read exactly as ClickHouse's
    ``JSONExtract(text, 'Array(UInt64)')`` reads them, so a trace's tokens are the same whichever reads them.

    Anything but a JSON array is ``[]``. An element reads as itself when it is an integer in UInt64,
    a non-negative float (its integer part), ``true``/``false``, or a string holding such a number
    (``"+5"``, ``"5."``, ``"1e3"``); any other element reads 0, and an array none of whose elements
    read is ``[]``.
    """
    import json
    import math

    def refuse(constant: str) -> None:
        raise ValueError(constant)  # NaN and Infinity are not JSON; ClickHouse refuses them too

    def finite(number: str) -> float:
        value = float(number)
        if math.isinf(value):
            raise ValueError(number)  # 1e400: ClickHouse refuses the whole text
        return value

    try:
        values = json.loads(text, parse_constant=refuse, parse_float=finite)
    except (ValueError, TypeError, RecursionError):
        return []
    if not isinstance(values, list):
        return []
    read = [_uint64(value) for value in values]
    if not any(ok for _, ok in read):
        return []
    return [number for number, _ in read]


def _uint64(value: Any) -> tuple[int, bool]:
    """(the element as UInt64, whether it converted); 0 when it did not, as ClickHouse fills it."""
    if isinstance(value, str):
        if not _NUMBER_TEXT.fullmatch(value):
            return 0, False
        value = int(value) if value.lstrip("+").isdigit() else float(value)
    if isinstance(value, bool):
        return int(value), True
    if isinstance(value, int | float) and 0 <= value < _UINT64:
        return int(value), True
    return 0, False


def _round(value: float, digits: int) -> float:
    """``round(value, digits)`` as ClickHouse computes it (the nearest integer of ``value * 10^digits``,
    ties to even), so a figure reads the same as in SQL: Python's ``round(0.15, 1)`` is 0.1, ClickHouse's 0.2."""
    scale = 10 ** digits
    return round(value * scale) / scale


def _after(start: dt.datetime, offset_us: int) -> dt.datetime:
    """``start`` plus the offset cut to ``MAX_OFFSET_US``, as ``llm_token_events`` computes Timestamp."""
    return start + dt.timedelta(microseconds=min(offset_us, MAX_OFFSET_US))


def window_stalls(client, db: str, start: dt.datetime, end: dt.datetime, min_gap_ms: float = 500.0,
                  tables: Tables = DEFAULT_TABLES, **filters: str) -> list[dict[str, Any]]:
    """Requests whose longest inter-token gap exceeded ``min_gap_ms``, by instance and minute of the stall,
    with the trace ids of the (up to) three worst as examples."""
    return _rows(client, f"""
SELECT instance, minute, count() AS requests, round(max(gap), 1) AS max_gap_ms, round(avg(gap), 1) AS mean_gap_ms,
       min(stall_at) AS first_stall_at,
       -- the three worst, so the examples do not depend on which part a thread read first
       arrayMap(x -> x.2, arraySlice(arrayReverseSort(groupArray((gap, trace))), 1, 3)) AS example_traces
FROM (
    SELECT TraceId AS trace, Instance AS instance, TokenGapMaxMs AS gap,
           ifNull({STALL_AT}, Timestamp) AS stall_at,
           toStartOfMinute(stall_at) AS minute
    FROM {{db:Identifier}}.{{t_traces:Identifier}}
    WHERE Timestamp >= {{start:DateTime64(9)}} AND Timestamp < {{end:DateTime64(9)}} AND IsRequest
      AND TokenGapMaxMs > {{min_gap:Float64}} {REQUEST_FILTERS}
    ORDER BY gap DESC
    LIMIT 1 BY TraceId
)
GROUP BY instance, minute
ORDER BY minute, instance""", {**_at(db, tables),
                               "start": start, "end": end, "min_gap": min_gap_ms, **_filters(**filters)})


def neighbors(client, db: str, instance: str, at: dt.datetime, lookback: dt.timedelta = dt.timedelta(minutes=15),
              service: str = "", tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """What else was on ``instance`` at the instant ``at``: in a queue, in prefill or in decode.

    Each request is labelled with a :class:`Phase`. The engine's own phase spans say it when the
    trace has them (``engine.queue``, ``engine.prefill``: our engine-side tracer, the demo);
    otherwise the request span's own timing: its queue (``llm.queue_ms``: the gateway's; vLLM's
    ``time_in_queue`` on vLLM's own spans: the engine's), then up to the first token prefill on an
    engine's span, or "awaiting first token" on a gateway's span, which cannot tell the engine's
    queue from its prefill; decoding after. ``prefill_from_ms``: when its prefill began, from the
    request's start, when the trace says. Requests longer than ``lookback`` are not searched for
    (they would have to start before ``at - lookback``).
    """
    return _rows(client, """
SELECT TraceId AS trace_id, ServiceName AS service,
       multiIf(ifNull(in_prefill, false), {p_prefill:String},
               ifNull(in_engine_queue, false), {p_engine_queue:String},
               TtftMs IS NOT NULL AND elapsed_ms >= TtftMs, {p_decode:String},
               elapsed_ms < ifNull(QueueMs, 0), if(engine_span, {p_engine_queue:String}, {p_gateway_queue:String}),
               engine_span OR ifNull(has_phases, false), {p_prefill:String},
               {p_awaiting_first_token:String}) AS phase,
       round(elapsed_ms, 1) AS running_for_ms,
       InputTokens AS prompt_tokens, CachedInputTokens AS cached_tokens, toBool(CachedInputTokens > 0) AS prefix_cached,
       OutputTokens AS output_tokens, round(TtftMs, 1) AS ttft_ms, round(Duration / 1e6, 1) AS e2e_ms,
       round(QueueMs, 1) AS queue_ms,
       round(if(engine_span AND prefill_at IS NULL, QueueMs,
                dateDiff('microsecond', Timestamp, prefill_at) / 1000), 1) AS prefill_from_ms,
       Outcome AS outcome, Timestamp AS started
FROM (
    SELECT TraceId, ServiceName, InputTokens, CachedInputTokens, OutputTokens, TtftMs, QueueMs, Duration, Outcome,
           Timestamp, mapContains(SpanAttributes, {vllm_queue:String}) AS engine_span,
           dateDiff('microsecond', Timestamp, {at:DateTime64(9)}) / 1000 AS elapsed_ms
    FROM {db:Identifier}.{t_traces:Identifier}
    WHERE Timestamp <= {at:DateTime64(9)}
      AND Timestamp >= subtractMicroseconds({at:DateTime64(9)}, {lookback_us:Int64})
      AND IsRequest AND Instance = {instance:String}
      AND ({service:String} = '' OR ServiceName = {service:String})
      AND {SPAN_END} >= {at:DateTime64(9)}
    ORDER BY Timestamp DESC
    LIMIT 1 BY TraceId
) AS request
LEFT JOIN (
    -- the engine's phase spans of the same traces: where each request was at that instant (a trace
    -- without them joins as false/NULL: no setting changed, the reader is readonly)
    SELECT TraceId,
           countIf(SpanName = {engine_queue:String}
                   AND {SPAN_END} > {at:DateTime64(9)}) > 0 AS in_engine_queue,
           countIf(SpanName = {engine_prefill:String}
                   AND {SPAN_END} > {at:DateTime64(9)}) > 0 AS in_prefill,
           -- the engine's queue ends where its prefill begins (a prefill span may not have begun yet)
           if(countIf(SpanName = {engine_queue:String}) > 0,
              maxIf({SPAN_END}, SpanName = {engine_queue:String}),
              NULL) AS prefill_at,
           true AS has_phases
    FROM {db:Identifier}.{t_traces:Identifier}
    WHERE SpanName IN ({engine_queue:String}, {engine_prefill:String})
      AND Timestamp <= {at:DateTime64(9)}
      AND Timestamp >= subtractMicroseconds({at:DateTime64(9)}, {lookback_us:Int64})
    GROUP BY TraceId
) AS phases USING (TraceId)
ORDER BY phase = {p_decode:String}, InputTokens DESC, trace_id""".replace("{SPAN_END}", SPAN_END),
                 {**_at(db, tables), "instance": instance, "at": at, "lookback_us": int(lookback.total_seconds() * 1e6),
                  "service": service or "", "vllm_queue": attr.GEN_AI_LATENCY_QUEUE_S,
                  "engine_queue": attr.SPAN_ENGINE_QUEUE, "engine_prefill": attr.SPAN_PREFILL,
                  **{f"p_{p.name.lower()}": p.value for p in Phase}})


def retries(client, db: str, start: dt.datetime, end: dt.datetime, min_attempts: int = 2,
            limit: int = 100, tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """Retry chains: every attempt (``upstream`` span) of requests tried at least ``min_attempts`` times.

    ``status`` is ``error`` or ``ok``, ``error`` the attempt's ``error.type`` (timeout, 503...);
    ``gap_ms`` is measured (previous attempt's end to this attempt's start); ``backoff_ms`` is what
    the gateway said it waited.
    """
    return _rows(client, f"""
SELECT TraceId AS trace_id, RetryAttempt AS attempt, Instance AS instance, Timestamp AS started,
       round(Duration / 1e6, 1) AS duration_ms, {SPAN_STATUS} AS status,
       nullIf(SpanAttributes[{{k_error:String}}], '') AS error,
       toFloat64OrNull(SpanAttributes[{{k_backoff:String}}]) AS backoff_ms,
       if(RetryAttempt = 0, NULL, round(dateDiff('microsecond',
           lagInFrame({SPAN_END}) OVER chain, Timestamp) / 1000, 1)) AS gap_ms
FROM {{db:Identifier}}.{{t_traces:Identifier}}
WHERE Timestamp >= {{start:DateTime64(9)}} AND Timestamp < {{end:DateTime64(9)}} AND SpanName = {{upstream:String}}
  AND TraceId IN (
      SELECT TraceId FROM {{db:Identifier}}.{{t_traces:Identifier}}
      WHERE Timestamp >= {{start:DateTime64(9)}} AND Timestamp < {{end:DateTime64(9)}}
        AND SpanName = {{upstream:String}}
      GROUP BY TraceId HAVING uniqExact(RetryAttempt) >= {{min_attempts:UInt16}}
      ORDER BY min(Timestamp) LIMIT {{limit:UInt32}})
WINDOW chain AS (PARTITION BY TraceId ORDER BY RetryAttempt, Timestamp
                 ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
ORDER BY min(Timestamp) OVER (PARTITION BY TraceId), trace_id, attempt""",
                 {**_at(db, tables), "start": start, "end": end, "min_attempts": min_attempts, "limit": limit,
                  "k_backoff": attr.RETRY_BACKOFF_MS, "k_error": attr.ERROR_TYPE, "upstream": attr.SPAN_UPSTREAM})


def percentiles(client, db: str, start: dt.datetime, end: dt.datetime, by: str = "instance", metric: str = "ttft",
                service: str = "", pool: str = "", instance: str = "",
                tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """p50, p95, p99 of TTFT (or TPOT, e2e) per minute and per instance (or pool, model...), from the rollup."""
    key, state = GROUP_COLUMNS[by], PERCENTILE_METRICS[metric]
    return _rows(client, f"""
SELECT minute, service, {by}, requests, errors, round(q[1], 1) AS {metric}_p50_ms, round(q[2], 1) AS {metric}_p95_ms,
       round(q[3], 1) AS {metric}_p99_ms
FROM (
    SELECT Minute AS minute, ServiceName AS service, {key} AS {by}, sum(Requests) AS requests,
           sum(Errors) + sum(Timeouts) AS errors, quantilesMerge({QUANTILE_LEVELS})({state}) AS q
    FROM {{db:Identifier}}.{{t_requests_1m:Identifier}}
    WHERE Minute >= toStartOfMinute({{start:DateTime}}) AND Minute < {{end:DateTime64(9)}}
      AND ({{service:String}} = '' OR ServiceName = {{service:String}})
      AND ({{pool:String}} = '' OR Pool = {{pool:String}})
      AND ({{instance:String}} = '' OR Instance = {{instance:String}})
    GROUP BY minute, service, {by})
ORDER BY minute, service, {by}""",
                 {**_at(db, tables), "start": start, "end": end, "service": service or "", "pool": pool or "",
                  "instance": instance or ""})


def compare_pools(client, db: str, start: dt.datetime, end: dt.datetime, service: str = "",
                  pools: tuple[str, ...] = (), tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """Canary vs stable (or any pools) side by side, per pool and balancing strategy: TTFT percentiles,
    tokens/s, error rate, and how evenly the pool spread its requests.

    Error rate counts errors, timeouts and rejections (cancellations are the client's choice);
    tokens/s is output tokens over decode time (e2e minus TTFT) of requests that produced tokens.
    A hot spot hides in a pool's own percentiles: ``busiest_instance_share`` is the share of the
    pool's routed requests its busiest instance served (1 / ``instances`` when even), and
    ``slowest_instance_ttft_p99_ms`` the p99 TTFT of its slowest instance. A pool whose strategy
    changed in the window has a row per strategy.
    """
    return _rows(client, f"""
SELECT service, pool, strategy, requests, instances, busiest_instance_share, round(ttft[1], 1) AS ttft_p50_ms,
       round(ttft[2], 1) AS ttft_p95_ms, round(ttft[3], 1) AS ttft_p99_ms, slowest_instance_ttft_p99_ms,
       tokens_per_s, error_rate
FROM (
    SELECT service, pool, strategy, sum(served) AS requests, countIf(instance != '') AS instances,
           round(if(sumIf(served, instance != '') > 0,
                    maxIf(served, instance != '') / sumIf(served, instance != ''), NULL), 3)
               AS busiest_instance_share,
           quantilesMerge({QUANTILE_LEVELS})(ttft_state) AS ttft,
           -- an instance without a first token has NaN quantiles: it is not the slowest
           round(maxIf(instance_ttft[3], instance != '' AND NOT isNaN(instance_ttft[3])), 1)
               AS slowest_instance_ttft_p99_ms,
           round(if(sum(decode_s) > 0, sum(output_tokens) / sum(decode_s), NULL), 1) AS tokens_per_s,
           round(sum(failed) / sum(served), 4) AS error_rate
    FROM (
        SELECT ServiceName AS service, Pool AS pool, Strategy AS strategy, Instance AS instance,
               sum(Requests) AS served, quantilesMergeState({QUANTILE_LEVELS})(TtftMs) AS ttft_state,
               quantilesMerge({QUANTILE_LEVELS})(TtftMs) AS instance_ttft, sum(OutputTokens) AS output_tokens,
               sum(DecodeSeconds) AS decode_s, sum(Errors) + sum(Timeouts) + sum(Rejected) AS failed
        FROM {{db:Identifier}}.{{t_requests_1m:Identifier}}
        WHERE Minute >= toStartOfMinute({{start:DateTime}}) AND Minute < {{end:DateTime64(9)}}
          AND ({{service:String}} = '' OR ServiceName = {{service:String}})
          AND (empty({{pools:Array(String)}}) OR has({{pools:Array(String)}}, Pool))
        GROUP BY service, pool, strategy, instance)
    GROUP BY service, pool, strategy)
ORDER BY service, pool, strategy""", {**_at(db, tables),
                                      "start": start, "end": end, "service": service or "", "pools": list(pools)})


def dimension_values(client, db: str, start: dt.datetime, end: dt.datetime, dimension: str,
                     tables: Tables = DEFAULT_TABLES) -> list[str]:
    """The values of ``dimension`` (pool, instance, model...) that have requests in the window, from the rollup.

    Lets the CLI tell a filter that matches nothing ("no pool 'nosuch'; pools here: canary, stable")
    from a window without traffic, instead of printing "(no rows)" for a typo.
    """
    column = DIMENSIONS[dimension]
    return [row["value"] for row in _rows(client, f"""
SELECT DISTINCT {column} AS value FROM {{db:Identifier}}.{{t_requests_1m:Identifier}}
WHERE Minute >= toStartOfMinute({{start:DateTime}}) AND Minute < {{end:DateTime64(9)}} AND {column} != ''
ORDER BY value""", {**_at(db, tables), "start": start, "end": end})]


def attempt_failures(client, db: str, start: dt.datetime, end: dt.datetime,
                     tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """Upstream attempts per instance: how many failed, with what ``error.type``, how fast, and when.

    A request retried to success ends ``success``, so a pool whose every first attempt fails can
    show a 0% request error rate; counting attempts shows where they failed.
    """
    return _rows(client, """
SELECT Instance AS instance, count() AS attempts, countIf(failed) AS failed_attempts,
       arraySort(groupUniqArrayIf(error_type, failed AND error_type != '')) AS errors,
       if(countIf(failed) = 0, NULL, round(quantileIf(0.5)(Duration / 1e6, failed), 1)) AS failed_median_ms,
       if(countIf(failed) = 0, NULL, minIf(Timestamp, failed)) AS first_failure,
       if(countIf(failed) = 0, NULL, maxIf(Timestamp, failed)) AS last_failure,
       uniqExactIf(TraceId, failed) AS requests_hit
FROM (
    SELECT Instance, TraceId, Timestamp, Duration, StatusCode = 'Error' AS failed,
           SpanAttributes[{k_error:String}] AS error_type
    FROM {db:Identifier}.{t_traces:Identifier}
    WHERE Timestamp >= {start:DateTime64(9)} AND Timestamp < {end:DateTime64(9)} AND SpanName = {upstream:String})
GROUP BY instance
ORDER BY failed_attempts DESC, instance""",
                 {**_at(db, tables),
                  "start": start, "end": end, "k_error": attr.ERROR_TYPE, "upstream": attr.SPAN_UPSTREAM})


def instance_pools(client, db: str, start: dt.datetime, end: dt.datetime,
                   tables: Tables = DEFAULT_TABLES) -> dict[str, str]:
    """{instance: pool} of the instances that served requests in the window (from the rollup)."""
    rows = _rows(client, """
SELECT Instance AS instance, any(Pool) AS pool FROM {db:Identifier}.{t_requests_1m:Identifier}
WHERE Minute >= toStartOfMinute({start:DateTime}) AND Minute < {end:DateTime64(9)} AND Instance != ''
GROUP BY instance""", {**_at(db, tables), "start": start, "end": end})
    return {r["instance"]: r["pool"] for r in rows}


def slo_impact(client, db: str, start: dt.datetime, end: dt.datetime, ttft_slo_ms: float,
               service: str = "", tables: Tables = DEFAULT_TABLES) -> dict[str, Any]:
    """Requests in the window as their client saw them, against the TTFT SLO.

    One row per trace: its outermost request span (the earliest; the gateway's when there is one),
    or the given service's. ``over_slo`` counts requests whose first token came later than the SLO
    or never came (failed, timed out); cancelled and rejected requests are counted apart. ``service``
    is the service most requests entered through (the gateway's, in a traced gateway).
    """
    rows = _rows(client, """
SELECT count() AS requests, countIf(has({failed:Array(String)}, Outcome)) AS failed,
       countIf(Outcome = {rejected:String}) AS rejected, countIf(Outcome = {cancelled:String}) AS cancelled,
       countIf(Outcome = {success:String} AND ifNull(TtftMs, 0) > {slo:Float64}) AS slow,
       countIf(has({failed:Array(String)}, Outcome)
               OR (Outcome = {success:String} AND ifNull(TtftMs, 0) > {slo:Float64})) AS over_slo,
       round(quantile(0.95)(TtftMs), 1) AS ttft_p95_ms, topKIf(1)(ServiceName, ServiceName != '') AS top_service
FROM (
    SELECT TraceId, Outcome, TtftMs, ServiceName FROM {db:Identifier}.{t_traces:Identifier}
    WHERE Timestamp >= {start:DateTime64(9)} AND Timestamp < {end:DateTime64(9)} AND IsRequest
      AND ({service:String} = '' OR ServiceName = {service:String})
    ORDER BY Timestamp
    LIMIT 1 BY TraceId)""", {**_at(db, tables),
                             "start": start, "end": end, "slo": ttft_slo_ms, "service": service or "",
                             "failed": [attr.Outcome.ERROR, attr.Outcome.TIMEOUT], "success": attr.Outcome.SUCCESS,
                             "rejected": attr.Outcome.REJECTED, "cancelled": attr.Outcome.CANCELLED})
    impact = rows[0]
    # the service most requests entered through: whose view of latency the report's charts show
    impact["service"] = (impact.pop("top_service") or [service or ""])[0]
    return impact


def window_percentiles(client, db: str, start: dt.datetime, end: dt.datetime, by: str = "instance",
                       service: str = "", tables: Tables = DEFAULT_TABLES) -> list[dict[str, Any]]:
    """TTFT p50/p95/p99 per service and instance (or pool...) over the whole window, from the rollup."""
    key = GROUP_COLUMNS[by]
    return _rows(client, f"""
SELECT service, {by}, requests, errors, round(q[1], 1) AS ttft_p50_ms, round(q[2], 1) AS ttft_p95_ms,
       round(q[3], 1) AS ttft_p99_ms
FROM (
    SELECT ServiceName AS service, {key} AS {by}, sum(Requests) AS requests, sum(Errors) + sum(Timeouts) AS errors,
           quantilesMerge({QUANTILE_LEVELS})(TtftMs) AS q
    FROM {{db:Identifier}}.{{t_requests_1m:Identifier}}
    WHERE Minute >= toStartOfMinute({{start:DateTime}}) AND Minute < {{end:DateTime64(9)}}
      AND ({{service:String}} = '' OR ServiceName = {{service:String}})
    GROUP BY service, {by})
ORDER BY ttft_p95_ms DESC, service, {by}""", {**_at(db, tables), "start": start, "end": end, "service": service or ""})

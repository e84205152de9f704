"""Spans at fractional seconds around a window's edges, each in its own unmerged part.

The post-incident questions are asked minutes after an incident, before ClickHouse has merged the
small parts the receiver wrote. Part pruning works on each part's min/max, so a query whose time
bound is rounded to whole seconds answers wrongly exactly then (issue 17: ``traces show`` missed a
third of just-sent traces). :func:`load` writes every span with its own INSERT into tables whose
merges are stopped, so each part holds one span and every bound is tested against part edges.

``T`` is a whole minute. The window is ``[T + 10.5 s, T + 70.5 s)``; requests lie just outside
and just inside both edges and on both sides of the minute boundary ``T + 60 s``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from infersight import attributes as attr
from infersight.pipelines.schema.ddl import DEFAULT_TABLES
from tests.pipelines.span_rows import insert_spans, span_row

INSTANCE = "10.0.0.7:8000"
STALL_MS = 800.0
# Seconds after T of each request's start; the window is [10.5, 70.5).
REQUEST_OFFSETS = (10.3, 10.7, 30.2, 30.7, 59.9, 60.1, 70.2, 70.8)
WINDOW = (10.5, 70.5)
NEIGHBOR_AT = 30.5  # the request started at 30.2 runs for a second there; the one at 30.7 has not started


def _hex(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Boundary:
    t0: dt.datetime  # T, a whole minute

    def at(self, seconds: float) -> dt.datetime:
        return self.t0 + dt.timedelta(seconds=seconds)

    @property
    def start(self) -> dt.datetime:
        return self.at(WINDOW[0])

    @property
    def end(self) -> dt.datetime:
        return self.at(WINDOW[1])

    def trace_id(self, name: str) -> str:
        return _hex(f"trace:{name}", 32)

    def inside(self) -> set[str]:
        """Trace ids of the requests that start inside the window."""
        return {self.trace_id(f"req-{s}") for s in REQUEST_OFFSETS if WINDOW[0] <= s < WINDOW[1]}

    def in_window_minutes(self) -> int:
        """Requests in the minutes the window touches: the per-minute rollup's granularity."""
        first, last = int(WINDOW[0] // 60), int(WINDOW[1] // 60)
        return sum(1 for s in REQUEST_OFFSETS if first <= s // 60 <= last)


def _request(trace: str, start: dt.datetime, duration_ms: float, instance: str = INSTANCE) -> list:
    """A gateway request span (with a stall summary) and two upstream attempts: one retry chain."""
    gateway = _hex(f"span:{trace}:gw", 16)
    summary = {attr.REQUEST_OUTCOME: "success", attr.INSTANCE: instance, attr.POOL: "stable",
               attr.GEN_AI_REQUEST_MODEL: "m", attr.TTFT_MS: 50.0, attr.TPOT_MS: 10.0, attr.QUEUE_MS: 0.0,
               attr.GEN_AI_USAGE_INPUT_TOKENS: 100, attr.GEN_AI_USAGE_OUTPUT_TOKENS: 3,
               attr.TOKEN_GAP_MAX_MS: STALL_MS, attr.TOKEN_STALL_OFFSET_MS: 60.0, attr.RETRY_ATTEMPT: 1,
               attr.TOKEN_OFFSETS_US: [50_000, 60_000, 60_000 + int(STALL_MS * 1000)]}
    ms = dt.timedelta(milliseconds=1)
    return [
        span_row(start, trace, gateway, "chat m", duration_ms, attributes=summary),
        span_row(start + ms, trace, _hex(f"span:{trace}:a0", 16), attr.SPAN_UPSTREAM, 5.0, parent=gateway,
                 attributes={attr.INSTANCE: "10.0.0.8:8000", attr.RETRY_ATTEMPT: 0}, status="Error", kind="Client"),
        span_row(start + 10 * ms, trace, _hex(f"span:{trace}:a1", 16), attr.SPAN_UPSTREAM, duration_ms - 20,
                 parent=gateway, attributes={attr.INSTANCE: instance, attr.RETRY_ATTEMPT: 1,
                                             attr.RETRY_BACKOFF_MS: 4.0}, kind="Client"),
    ]


def load(client, database: str, t0: dt.datetime) -> Boundary:
    """Write the boundary requests and the lookup traces, one INSERT (one part) per span."""
    t = DEFAULT_TABLES
    for table in (t.traces, t.trace_id_ts, t.token_events, t.requests_1m):
        client.command(f"SYSTEM STOP MERGES `{database}`.`{table}`")
    data = Boundary(t0)
    rows = []
    for seconds in REQUEST_OFFSETS:
        rows += _request(data.trace_id(f"req-{seconds}"), data.at(seconds), 1000.0)
    for row in rows:
        insert_spans(client, database, [row])
    return data


def lookup_traces(client, database: str, t0: dt.datetime, count: int = 20) -> dict[str, int]:
    """Traces for ``traces show``, {trace id: spans}: single spans at every tenth of a second, and
    two-span traces whose child lands in a later second than the root, in a part of its own."""
    for table in (DEFAULT_TABLES.traces, DEFAULT_TABLES.trace_id_ts):
        client.command(f"SYSTEM STOP MERGES `{database}`.`{table}`")
    traces: dict[str, int] = {}
    for n in range(count):
        trace = _hex(f"lookup:{n}", 32)
        start = t0 + dt.timedelta(seconds=n + (n % 10) / 10 + 0.05)
        insert_spans(client, database, [span_row(start, trace, _hex(f"{trace}:root", 16), "chat m", 300.0)])
        traces[trace] = 1
        if n % 2:
            child = start + dt.timedelta(seconds=1.7)
            insert_spans(client, database, [span_row(child, trace, _hex(f"{trace}:child", 16), "late child", 5.0,
                                                     parent=_hex(f"{trace}:root", 16))])
            traces[trace] = 2
    return traces

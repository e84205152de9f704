"""A constructed incident with known answers, for the query, CLI and report tests.

Three instances serve one model for ten minutes: ``i-1`` and ``i-2`` in the stable pool, ``i-3`` in
the canary pool (slower first tokens, two errors). A background request arrives every 10 s,
round-robin. At ``stall_at`` (T0 + 5 min) a 32k-token prompt is in prefill on ``i-2`` and the two
requests decoding there stall for exactly 3 s; a request arriving on ``i-2`` during the stall waits
2.5 s in the queue. At T0 + 7 min one request times out on ``i-2`` and is retried on ``i-1`` after a
400 ms backoff.

Tests send it with the OpenTelemetry SDK through the real receiver (OTLP/HTTP for the gateway,
OTLP/gRPC for the engine), see otel_sdk.py; :func:`load` inserts the same spans directly instead.

Spans follow the instrumentation's tree (infersight/instrumentation/tracer.py): per request a
gateway request span ``chat <model>`` with ``gateway.queue``, ``gateway.route`` and one
``upstream`` span per attempt; under each upstream, the engine's request span (service ``vllm``)
with ``engine.queue``, ``engine.prefill`` and ``engine.decode``. Only the gateway span carries
the token timeline. Attribute values are Collector-style text (see span_rows.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from typing import Any

from infersight import attributes as attr
from tests.pipelines.otel_sdk import send_via_receiver
from tests.pipelines.span_rows import insert_spans, span_row

MODEL = "llama-3-70b"
POOLS = {"i-1": "stable", "i-2": "stable", "i-3": "canary"}
GAP_MS = 25.0
STALL_MS = 3000.0
# The token summary is the gateway's view; the engine span gets its own TTFT below.
GATEWAY_ONLY = {attr.TOKEN_COUNT, attr.TOKEN_GAP_MAX_MS, attr.TOKEN_STALL_INDEX, attr.TOKEN_STALL_OFFSET_MS,
                attr.TOKEN_OFFSETS_US, attr.TTFT_MS, attr.TPOT_MS}


def _hex(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass
class Request:
    request_id: str
    start: dt.datetime
    instance: str
    ttft_ms: float | None
    tokens: int
    input_tokens: int = 800
    cached_tokens: int = 512
    queue_ms: float = 0.0
    outcome: str = "success"
    stall_after_token: int | None = None  # the token after which decoding stalls STALL_MS
    attempts: list[tuple[str, float, str]] = field(default_factory=list)  # (instance, duration_ms, outcome)
    backoff_ms: float = 0.0

    @property
    def trace_id(self) -> str:
        return _hex("trace:" + self.request_id, 32)

    def offsets_us(self) -> list[int]:
        if self.ttft_ms is None:
            return []
        offsets, at = [], self.ttft_ms * 1000
        for index in range(self.tokens):
            offsets.append(int(at))
            at += (STALL_MS if index == self.stall_after_token else GAP_MS) * 1000
        return offsets

    @property
    def e2e_ms(self) -> float:
        offsets = self.offsets_us()
        if offsets:
            return offsets[-1] / 1000 + 5
        return sum(d for _, d, _ in self.attempts) + self.backoff_ms if self.attempts else 2000.0

    def summary_attributes(self) -> dict[str, Any]:
        offsets = self.offsets_us()
        values: dict[str, Any] = {
            attr.REQUEST_ID: self.request_id, attr.REQUEST_OUTCOME: self.outcome,
            attr.GEN_AI_OPERATION_NAME: "chat", attr.GEN_AI_REQUEST_MODEL: MODEL, attr.INSTANCE: self.instance,
            attr.POOL: POOLS[self.instance], attr.ROUTING_STRATEGY: "least_conn", attr.QUEUE_MS: self.queue_ms,
            attr.GEN_AI_USAGE_INPUT_TOKENS: self.input_tokens, attr.CACHED_INPUT_TOKENS: self.cached_tokens,
            attr.GEN_AI_USAGE_OUTPUT_TOKENS: len(offsets), attr.TOKEN_COUNT: len(offsets),
            attr.RETRY_ATTEMPT: max(len(self.attempts) - 1, 0),
        }
        if self.ttft_ms is not None:
            values[attr.TTFT_MS] = self.ttft_ms
        if len(offsets) > 1:
            gaps = [b - a for a, b in zip(offsets, offsets[1:], strict=False)]
            longest = max(range(len(gaps)), key=gaps.__getitem__)
            values[attr.TPOT_MS] = (offsets[-1] - offsets[0]) / 1000 / (len(offsets) - 1)
            values[attr.TOKEN_GAP_MAX_MS] = gaps[longest] / 1000
            values[attr.TOKEN_STALL_INDEX] = longest + 1
            values[attr.TOKEN_STALL_OFFSET_MS] = offsets[longest] / 1000
        return values


@dataclass
class Incident:
    t0: dt.datetime
    requests: dict[str, Request]

    @property
    def stall_at(self) -> dt.datetime:
        return self.t0 + dt.timedelta(minutes=5)

    @property
    def end(self) -> dt.datetime:
        return self.t0 + dt.timedelta(minutes=10)

    def trace_id(self, request_id: str) -> str:
        return self.requests[request_id].trace_id


def build(t0: dt.datetime) -> Incident:
    requests: dict[str, Request] = {}
    for n in range(60):
        instance = f"i-{n % 3 + 1}"
        canary = instance == "i-3"
        failed = canary and n in (2, 32)
        requests[f"bg-{n}"] = Request(f"bg-{n}", t0 + dt.timedelta(seconds=10 * n), instance,
                                      None if failed else (300.0 if canary else 150.0), 0 if failed else 20,
                                      outcome="error" if failed else "success")
    stall = t0 + dt.timedelta(minutes=5)
    ms = lambda v: dt.timedelta(milliseconds=v)  # noqa: E731
    requests["long-prefill"] = Request("long-prefill", stall - ms(200), "i-2", 3200.0, 20, input_tokens=32000,
                                       cached_tokens=0)
    # Decoding on i-2 when the long prefill takes the GPU: the token at exactly stall_at is followed by 3 s of nothing.
    requests["victim-1"] = Request("victim-1", stall - ms(1000), "i-2", 150.0, 50, stall_after_token=34)
    requests["victim-2"] = Request("victim-2", stall - ms(600), "i-2", 100.0, 40, stall_after_token=20)
    requests["late-arrival"] = Request("late-arrival", stall + ms(500), "i-2", 2700.0, 20, queue_ms=2500.0)
    requests["retried"] = Request("retried", t0 + dt.timedelta(minutes=7, seconds=3), "i-1", 2560.0, 20,
                                  attempts=[("i-2", 2000.0, "timeout"), ("i-1", 700.0, "success")], backoff_ms=400.0)
    return Incident(t0, requests)


def spec(start: dt.datetime, trace_id: str, span_id: str, name: str, duration_ms: float, service: str = "gateway",
         parent: str = "", attributes: dict[str, Any] | None = None, status: str = "Ok", kind: str = "Server"):
    return {"start": start, "trace_id": trace_id, "span_id": span_id, "name": name, "duration_ms": duration_ms,
            "service": service, "parent": parent, "attributes": attributes or {}, "status": status, "kind": kind}


def spans(request: Request) -> list[dict[str, Any]]:
    """The request's spans, as keyword arguments of :func:`span_row`."""
    trace, start, rid = request.trace_id, request.start, request.request_id
    ms = lambda v: dt.timedelta(milliseconds=v)  # noqa: E731
    sid = lambda name: _hex(f"span:{rid}:{name}", 16)  # noqa: E731
    gateway = sid("gateway")
    gateway_status = "Ok" if request.outcome == "success" else "Error"
    offsets = request.offsets_us()
    summary = request.summary_attributes()
    rows = [
        spec(start, trace, gateway, f"chat {MODEL}", request.e2e_ms, "gateway",
                 attributes=summary | ({attr.TOKEN_OFFSETS_US: offsets} if offsets else {}), status=gateway_status),
        spec(start, trace, sid("queue"), attr.SPAN_GATEWAY_QUEUE, 1.0, "gateway", gateway, kind="Internal"),
        spec(start + ms(1), trace, sid("route"), attr.SPAN_ROUTING, 0.5, "gateway", gateway, kind="Internal",
                 attributes={attr.INSTANCE: request.instance, attr.RETRY_ATTEMPT: 0,
                             attr.ROUTING_STRATEGY: "least_conn", attr.ROUTING_PREFIX_CACHE_RATIO: 0.64,
                             attr.ROUTING_CANDIDATES: [{"instance": i, "score": 0.5} for i in POOLS]}),
    ]
    attempts = request.attempts or [(request.instance, request.e2e_ms - 2, request.outcome)]
    at = start + ms(2)
    for number, (instance, duration, outcome) in enumerate(attempts):
        upstream = sid(f"upstream:{number}")
        up_attrs = {attr.INSTANCE: instance, attr.RETRY_ATTEMPT: number}
        if number:
            up_attrs[attr.RETRY_BACKOFF_MS] = request.backoff_ms
        if outcome != "success":
            up_attrs[attr.ERROR_TYPE] = outcome
        rows.append(spec(at, trace, upstream, attr.SPAN_UPSTREAM, duration, "gateway", gateway,
                             attributes=up_attrs, status="Ok" if outcome == "success" else "Error", kind="Client"))
        engine = sid(f"engine:{number}")
        since_start = (at - start).total_seconds() * 1000
        # The engine sees the request from its upstream call on: its TTFT is shorter by that much.
        ttft = request.ttft_ms - since_start if outcome == "success" and request.ttft_ms is not None else duration
        engine_attrs = {k: v for k, v in summary.items() if k not in GATEWAY_ONLY}
        engine_attrs |= {attr.INSTANCE: instance, attr.POOL: POOLS[instance], attr.REQUEST_OUTCOME: outcome,
                         attr.RETRY_ATTEMPT: 0}
        if outcome == "success" and request.ttft_ms is not None:
            engine_attrs[attr.TTFT_MS] = ttft
        rows.append(spec(at, trace, engine, f"chat {MODEL}", duration, "vllm", upstream, attributes=engine_attrs,
                             status="Ok" if outcome == "success" else "Error"))
        rows.append(spec(at, trace, sid(f"equeue:{number}"), attr.SPAN_ENGINE_QUEUE, request.queue_ms, "vllm",
                             engine, kind="Internal"))
        rows.append(spec(at + ms(request.queue_ms), trace, sid(f"prefill:{number}"), attr.SPAN_PREFILL,
                             ttft - request.queue_ms, "vllm", engine, kind="Internal",
                             attributes={attr.GEN_AI_USAGE_INPUT_TOKENS: request.input_tokens,
                                         attr.CACHED_INPUT_TOKENS: request.cached_tokens}))
        if outcome == "success" and offsets:
            rows.append(spec(at + ms(ttft), trace, sid(f"decode:{number}"), attr.SPAN_DECODE,
                                 duration - ttft, "vllm", engine, kind="Internal"))
        at += ms(duration + (request.backoff_ms if number + 1 < len(attempts) else 0))
    return rows


def all_specs(incident: Incident) -> list[dict[str, Any]]:
    return [s for request in incident.requests.values() for s in spans(request)]


def load(client, database: str, incident: Incident) -> int:
    """Insert the incident directly, as the OTel Collector's exporter would; returns the number of spans."""
    rows = [span_row(**s) for s in all_specs(incident)]
    insert_spans(client, database, rows)
    return len(rows)


def loaded_database(server, name: str, t0: dt.datetime, via: str = "receiver"):
    """Generator for module-scoped fixtures: a migrated database ``name`` holding the incident, dropped after.

    ``via="receiver"`` (the default) sends it with the OTel SDK through the real receiver;
    ``via="rows"`` inserts the rows directly, as the Collector's exporter would.
    """
    from infersight.pipelines.schema import migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    client = server.client()
    client.command(f"DROP DATABASE IF EXISTS `{name}` SYNC")
    migrations.migrate(client, SchemaOptions(database=name))
    incident = build(t0)
    spans_loaded = send_via_receiver(server, name, incident) if via == "receiver" else load(client, name, incident)
    yield client, name, incident, spans_loaded
    client.command(f"DROP DATABASE IF EXISTS `{name}` SYNC")


_SHARED: dict[int, tuple] = {}
SHARED_T0 = (dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=30)).replace(second=0, microsecond=0)


def shared(server) -> tuple:
    """(client, database, incident, spans): the incident sent once per session through the receiver.

    The query, CLI and report tests only read it, so they share one load (about 4 s on 2 cores).
    """
    if id(server) not in _SHARED:
        loader = loaded_database(server, "incident_shared", SHARED_T0)
        _SHARED[id(server)] = next(loader)  # the database lives as long as the session's server
    return _SHARED[id(server)]

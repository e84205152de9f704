"""The demo's traces, in virtual time: the simulated fleet's requests replayed through the real
RequestTracer as the demo replays them (:mod:`infersight.commands.demo_replay`).

A gateway re-attempt becomes the tracer's retry (a failed ``upstream`` span, then the next
attempt), and reaches ClickHouse through OTLP and the receiver where the incident report's
failed-attempt queries read it; a token timeline is its engine's decode steps, so a stall in the
simulation is the longest gap of the traces of the requests that lived through it.
"""

from __future__ import annotations

import datetime as dt
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from infersight import attributes as attr
from infersight.attributes import Outcome, UpstreamError
from infersight.commands.demo_replay import Replay
from infersight.config import Config
from infersight.instrumentation import RequestTracer, TailSampler, setup_tracing
from infersight.simulator.decode_log import DecodeLog
from infersight.simulator.fleet import TICK_S, Fleet
from infersight.simulator.gateway import CONNECT_TIMEOUT_S
from infersight.simulator.scenario import Scenario
from tests.pipelines.receiver_payloads import migrate, start_receiver

MODEL = "gemma-27b-int4"


def _scenario(minutes: int, events: list[dict], instances: int = 4, rate: float = 6.0,
              prompt_median: int = 1500) -> Scenario:
    return Scenario.model_validate({
        "name": "demo-traces", "title": "test fleet", "story": "a small fleet for the replay tests",
        "minutes": minutes, "seed": 5,
        "fleet": [{"name": MODEL, "pools": [{"name": "stable", "instances": instances}]}],
        "workload": [{"model": MODEL, "rate_per_s": rate, "prompt_tokens": {"median": prompt_median, "sigma": 0.4},
                      "output_tokens": {"median": 200, "sigma": 0.4}}],
        "events": events})


def _run(fleet: Fleet, log: DecodeLog, replay: Replay, until_s: float, each_tick=None) -> None:
    """Tick by tick, as the demo's driver does: log the engines after every tick, then hand over its requests."""
    log.record(fleet.engines(), fleet.now)
    while fleet.now < until_s:
        if each_tick is not None:
            each_tick(fleet)
        fleet.run_until(fleet.now + TICK_S)
        log.record(fleet.engines(), fleet.now)
        replay.flush()


def _capture(fleet: Fleet, replay: Replay) -> list:
    """Every ended request, as the sim ended it, besides handing it to the replay."""
    seen = []

    def on_end(req, outcome, now, kw):
        seen.append((req.id, outcome, tuple(req.failed_attempts or ()), req.instance))
        replay.ended(req, outcome, now, kw)

    fleet.metrics.on_end = on_end
    return seen


def test_gateway_re_attempts_reach_clickhouse_as_failed_upstream_attempts(clickhouse_server, clickhouse_database,
                                                                            tmp_path):
    from infersight.pipelines.queries import library

    migrate(clickhouse_server, clickhouse_database)
    receiver = start_receiver(clickhouse_server.dsn(clickhouse_database), tmp_path / "spool")
    tracing = setup_tracing("demo-gateway", protocol="http/protobuf", endpoint=f"{receiver.http_url}/v1/traces",
                            head_ratio=1.0)
    # One host's network drops half its connections from minute 1: the gateway re-attempts elsewhere.
    fleet = Fleet(_scenario(4, [{"at_minute": 1, "action": "network_jitter", "instances": [0],
                                 "params": {"error_share": 0.5, "delay_s": 0.0}}]), Config())
    jittery = fleet.engines()[0].instance
    base = time.time() - 3600  # the replay's clock: simulated second 0 an hour ago
    log = DecodeLog()
    replay = Replay(lambda clock: RequestTracer(tracer_provider=tracing.provider, provider_name="vllm",
                                                sampler=TailSampler(random_share=0.0), clock=clock), base, log)
    seen = _capture(fleet, replay)
    try:
        _run(fleet, log, replay, 4 * 60.0)
        replay.close(60.0)
        assert replay.errors == 0 and replay.replayed == len(seen)
        tracing.force_flush()
    finally:
        tracing.shutdown()
        receiver.stop()  # flushes what it holds into ClickHouse
    retried = {rid: failed for rid, outcome, failed, _ in seen if failed}
    assert len(retried) > 10, "the jittery host broke no attempt: the scenario lost its incident"
    assert all(i == jittery and e == UpstreamError.UNREACHABLE for f in retried.values() for i, _s, _e, e in f)

    client = clickhouse_server.client(clickhouse_database, role="reader")
    start, end = (dt.datetime.fromtimestamp(t, dt.UTC).replace(tzinfo=None) for t in (base, base + 600))
    chains = library.retries(client, clickhouse_database, start, end, limit=10_000)
    failures = {r["instance"]: r for r in library.attempt_failures(client, clickhouse_database, start, end)}
    client.close()
    by_trace: dict[str, list] = {}
    for row in chains:
        by_trace.setdefault(row["trace_id"], []).append(row)
    # Every re-attempted request is a chain in ClickHouse: attempt 0 failed on the jittery host with
    # error.type, after the connect timeout; attempt 1 went elsewhere.
    assert len(by_trace) == len(retried)
    for attempts in by_trace.values():
        first, second = sorted(attempts, key=lambda a: a["attempt"])[:2]
        assert (first["attempt"], first["status"], first["error"], first["instance"]) == (
            0, "error", UpstreamError.UNREACHABLE, jittery)
        assert abs(first["duration_ms"] - CONNECT_TIMEOUT_S * 1000) < 1.0
        # the gateway notices a broken attempt at its next tick and re-attempts at once (no backoff)
        assert second["attempt"] == 1 and second["instance"] != jittery and 0 <= second["gap_ms"] < TICK_S * 1000
    # The incident report's failed-attempt finding reads the same spans: every broken attempt, on its host.
    broken = sum(len(f) for f in retried.values())
    assert failures[jittery]["failed_attempts"] == broken
    assert failures[jittery]["errors"] == [UpstreamError.UNREACHABLE]
    assert all(r["failed_attempts"] == 0 for instance, r in failures.items() if instance != jittery)


def test_a_stalled_timeline_shows_the_simulated_stall_as_its_longest_gap():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # short prompts: their prefill chunks (a cold shared prefix: ~0.1 s) are gaps far shorter than the hiccup's steps
    fleet = Fleet(_scenario(3, [], prompt_median=150), Config())
    stalled = fleet.engines()[1]
    log = DecodeLog()
    replay = Replay(lambda clock: RequestTracer(tracer_provider=provider, provider_name="vllm",
                                                sampler=TailSampler(random_share=1.0),  # keep every timeline
                                                clock=clock, max_timeline_tokens=4096), 0.0, log)
    seen = _capture(fleet, replay)
    stall_at = 120.0

    def hiccup(f: Fleet) -> None:  # one tick in which every decode step takes 200 times longer (a GPU hiccup)
        stalled.slowdown = 200.0 if f.now == stall_at else 1.0

    _run(fleet, log, replay, 180.0, each_tick=hiccup)
    replay.close(60.0)
    assert replay.errors == 0 and replay.replayed == len(seen)
    moment = log.moment(stalled.instance, stall_at + 1.0)
    assert stall_at <= moment.t0 < moment.t1 <= stall_at + TICK_S and moment.decoding > 0
    normal = log.moment(stalled.instance, stall_at - 1.0)
    assert moment.step_s > 10 * normal.step_s  # what the simulated instance did: one step every ~1 s

    spans = [s for s in exporter.get_finished_spans() if s.name == f"chat {MODEL}"
             and s.attributes[attr.REQUEST_OUTCOME] == Outcome.SUCCESS]
    through = [s for s in spans if s.attributes.get(attr.INSTANCE) == stalled.instance
               and s.start_time <= stall_at * 1e9 and s.end_time >= (stall_at + TICK_S) * 1e9]
    assert through, "no request lived through the stalled tick"
    for span in through:
        # The longest gap of its timeline is the stalled tick's step, and it began inside that tick.
        assert abs(span.attributes[attr.TOKEN_GAP_MAX_MS] - moment.step_s * 1000) < 1.0, span.attributes
        began = span.start_time / 1e9 + span.attributes[attr.TOKEN_STALL_OFFSET_MS] / 1000
        assert stall_at - 1e-3 <= began <= stall_at + TICK_S
    # Requests elsewhere, or decoding only after the hiccup, saw no such gap.
    others = [s for s in spans if s.attributes.get(attr.INSTANCE) != stalled.instance
              and s.attributes.get(attr.TOKEN_GAP_MAX_MS) is not None]
    assert others and max(s.attributes[attr.TOKEN_GAP_MAX_MS] for s in others) < moment.step_s * 1000 / 5


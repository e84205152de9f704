"""Recording rules, named ``level:metric:operations``; alerts and dashboards read these names.

Each name is built from the catalog signal it aggregates, so renaming a metric renames its rules.
"""

from __future__ import annotations

from infersight.alerts.model import Recording
from infersight.alerts.promql import added, events, larger, num, ratio, younger_than
from infersight.alerts.series import le
from infersight.signals import Signal, engine, gateway, gpu, request
from infersight.signals.engine import EngineRole
from infersight.thresholds import BURN_WINDOWS, Thresholds

QUANTILES = (0.5, 0.95, 0.99)
INSTANCE_LEVEL = ("model", "instance", "pool")  # request labels minus the strategy


def name(level: str | tuple[str, ...], metric: str, operations: str) -> str:
    if not isinstance(level, str):
        level = "_".join(level)
    return f"{level}:{metric}:{operations}"


def level_labels(record: str) -> tuple[str, ...]:
    """The labels a recorded series keeps, read back from its level: ``model_pool:...`` -> (model, pool)."""
    return tuple(record.split(":", 1)[0].split("_"))


def quantile_name(signal: Signal, level: tuple[str, ...], q: float) -> str:
    return name(level, signal.name, f"p{round(q * 100)}_rate5m")


# Names the alert modules use.
TTFT_P95_BY_MODEL = quantile_name(request.TTFT, ("model",), 0.95)
TTFT_P95_30M_BY_MODEL = name("model", request.TTFT.name, "p95_rate30m")
TTFT_P95_BY_INSTANCE = quantile_name(request.TTFT, INSTANCE_LEVEL, 0.95)
TTFT_P99_BY_INSTANCE = quantile_name(request.TTFT, INSTANCE_LEVEL, 0.99)
# The breaker's view: an instance's own TTFT (inside the engine, the gateway queue not counted) and
# the median of those p99s over the instances of its model and pool (its peers).
ENGINE_TTFT_P99_BY_INSTANCE = quantile_name(engine.TTFT, INSTANCE_LEVEL, 0.99)
ENGINE_TTFT_P99_POOL_MEDIAN = name(("model", "pool"), engine.TTFT.name, "p99_rate5m_median")
# A pool of fewer than MIN_PEERS instances serving has no peers of its own (the median of one or two
# p99s is about the instance itself): its instances are judged against the median of the model's
# instances of the same role (prefill, decode, mixed) in all pools, when those are MIN_PEERS or more.
MIN_PEERS = 3
ENGINE_TTFT_P99_MODEL_ROLE_MEDIAN = name(("model", "role"), engine.TTFT.name, "p99_rate5m_median")
ENGINE_TTFT_P99_PEERS = name(("model", "pool"), engine.TTFT.name, "p99_rate5m_peers")
# The breaker line: peer factor x the peers' median, never under the floor; and the share of an
# instance's requests slower than the first bucket bound at or over that line (read at a bound, so
# a bucket's width cannot make an instance look twice its peers: DESIGN 4, issue 11).
ENGINE_TTFT_BREAKER_LINE = name(("model", "pool"), engine.TTFT.name, "p99_breaker_line")
ENGINE_TTFT_BOUND = name("le", engine.TTFT.name + "_bucket", "bound")
ENGINE_TTFT_OVER_LINE = name(INSTANCE_LEVEL, engine.TTFT.name, "over_breaker_line_ratio_rate5m")
GATEWAY_QUEUE_SUM = name(("model", "pool"), gateway.QUEUE_DEPTH.name, "sum")
GATEWAY_QUEUE_AVG30M = name(("model", "pool"), gateway.QUEUE_DEPTH.name, "avg30m")
# Scale-out signal 1, the queue where it is (gateway and engines) in seconds of waiting: the requests'
# mean wait as measured (gateway queue time + engine queue time), or the queued requests over the rate
# the pool completes them (Little's law: how long the queue takes to drain), whichever is larger; the
# measured waits lag while a queue still grows (a wait is observed when it ends), a depth gauge is one
# sample a minute.
POOL_QUEUE_SUM = name(("model", "pool"), "llm_requests_queued", "sum")
POOL_QUEUE_AVG30M = name(("model", "pool"), "llm_requests_queued", "avg30m")
QUEUE_WAIT_MEASURED_30M = name(("model", "pool"), "llm_queue_wait_seconds", "mean_rate30m")
QUEUE_DRAIN_30M = name(("model", "pool"), "llm_requests_queued", "drain_seconds_avg30m")
QUEUE_WAIT_30M = name(("model", "pool"), "llm_queue_wait_seconds", "max30m")
INSTANCE_QUEUE_SUM = name(("model", "pool", "instance"), engine.REQUESTS_WAITING.name, "sum")
MODEL_QUEUE_SUM = name("model", engine.REQUESTS_WAITING.name, "sum")
MODEL_QUEUE_AVG30M = name("model", engine.REQUESTS_WAITING.name, "avg30m")
NODE_QUEUE_SUM = name("node", engine.REQUESTS_WAITING.name, "sum")
IN_FLIGHT_SUM = name("model", request.IN_FLIGHT.name, "sum")
SERVING_INSTANCES = name("model", "llm_instances_serving", "count")
# Scale-out signal 3, demand as a share of serving capacity (1 = capacity), the larger of two: requests
# in flight against the KV-bound concurrency of the capacity model, and prompt tokens to prefill (the
# prefix cache's hits left out) against the prefill compute the pool can use with first tokens in time.
IN_FLIGHT_CAPACITY_RATIO = name("model", request.IN_FLIGHT.name, "capacity_ratio")
PREFILL_TOKENS_RATE = name("model", "llm_prefill_tokens", "rate15m")
PREFILL_CAPACITY = name("model", "llm_prefill_capacity_tokens_per_second", "sum")
PREFILL_CAPACITY_RATIO = name("model", "llm_prefill_tokens", "capacity_ratio_rate15m")
DEMAND_CAPACITY_RATIO = name("model", "llm_demand", "capacity_ratio")
PREFILL_WINDOW = "15m"  # prompt tokens come in bursts of a few thousand: 5 minutes are too noisy to forecast
RETRIES_PER_REQUEST = name("model", "llm_retries_per_request", "ratio_rate5m")
EJECTED_COUNT = name(("model", "pool"), "llm_instances_ejected_5m", "count")
EJECTED_SHARE = name(("model", "pool"), "llm_instances_ejected_5m", "ratio")
REJECTION_RATIO = name("model", request.REJECTIONS.name, "ratio_rate5m")
PREFIX_HIT_RATIO = name("model", "llm_prefix_cache_hit", "ratio_rate5m")
CACHED_INPUT_RATIO = name(INSTANCE_LEVEL, request.CACHED_INPUT_TOKENS.name, "ratio_rate5m")
BANDWIDTH_AVG5M = name(("node", "gpu"), gpu.MEMORY_BANDWIDTH_UTILIZATION.name, "avg5m")
SM_ACTIVITY_AVG5M = name(("node", "gpu"), gpu.SM_ACTIVITY.name, "avg5m")


def slo_errors_name(window: str) -> str:
    return name("model", f"{request.TTFT.name}_slo_errors", f"ratio_rate{window}")


def _quantiles() -> list[Recording]:
    rules = []
    for signal in (request.TTFT, request.TPOT):
        for level in (INSTANCE_LEVEL, ("model",)):
            for q in QUANTILES:
                rules.append(Recording(quantile_name(signal, level, q), signal.quantile(q, by=level)))
    return rules


def _slo_errors(limits: Thresholds) -> list[Recording]:
    """Share of requests slower than the TTFT SLO, from the bucket at exactly the SLO bound."""
    good = request.TTFT.bucket(le=le(limits.ttft_slo_seconds))
    return [
        Recording(slo_errors_name(w),
                  f"1 - ({ratio(f'rate({good}[{w}])', f'rate({request.TTFT.count()}[{w}])', ('model',))})")
        for w in BURN_WINDOWS
    ]


def retries_per_request() -> str:
    """Gateway re-attempts plus client retries (new requests a client sent again) per request.

    Client retries are requests too, so without them a storm of client retries only grows the
    denominator. Either term may be absent (no gateway instrumented, no client sends the headers).
    """
    gateway_retries = f"sum by (model) ({request.RETRIES.rate()})"
    client_retries = f"sum by (model) ({request.CLIENT_RETRIES.rate()})"
    return (f"(({gateway_retries} + {client_retries}) or {gateway_retries} or {client_retries})\n"
            f"/ sum by (model) ({request.REQUESTS.rate()})")


def queue_wait_measured() -> str:
    """Seconds each request of a model's pool waited over 30 minutes, as the queue-time histograms
    measure it: the gateway's waiting per request it finished (it may observe only the requests it
    queued) plus the engines' mean queue time; either alone where only one is there. ">= 0" drops a
    side that saw no request (NaN), so it cannot hide the other."""
    by = ("model", "pool")
    gateway_wait = f"{ratio(f'rate({request.QUEUE_TIME.sum()}[30m])', request.REQUESTS.rate('30m'), by)} >= 0"
    engine_wait = (f"{ratio(f'rate({engine.QUEUE_TIME.sum()}[30m])', f'rate({engine.QUEUE_TIME.count()}[30m])', by)}"
                   " >= 0")
    return added(gateway_wait, engine_wait)


def queue_drain() -> str:
    """The 30-minute mean of requests queued (gateway and engines) over the rate the pool completes
    requests: seconds the queue takes to drain (the engines' count, else the gateway's)."""
    completed = (f"sum by (model, pool) ({engine.REQUESTS_FINISHED.rate('30m')})\n"
                 f"or sum by (model, pool) ({request.REQUESTS.rate('30m')})")
    return f"{POOL_QUEUE_AVG30M} / on (model, pool) ({completed})"


def prefill_tokens_rate() -> str:
    """Prompt tokens/s a model's engines prefill, the prefix cache's hits left out (engines without a
    prefix cache: all prompt tokens). A disaggregated decode instance counts the prompts whose KV
    cache it received over the link (vLLM counts them in its prompt tokens): not prefill work, left out."""
    prefilling = f"!={EngineRole.DECODE}"
    prompt = f"sum by (model) ({engine.PROMPT_TOKENS.rate(PREFILL_WINDOW, role=prefilling)})"
    hits = f"sum by (model) ({engine.PREFIX_CACHE_HITS.rate(PREFILL_WINDOW, role=prefilling)})"
    return f"({prompt} - {hits}\nor {prompt})"


def in_flight_capacity(limits: Thresholds) -> str:
    """Requests a model's serving instances hold in flight (KV-bound concurrency at the target rate)."""
    return f"{SERVING_INSTANCES} * {limits.requests_per_instance}"


def prefill_capacity(limits: Thresholds) -> str:
    """Prompt tokens/s a model's instances that prefill take with first tokens still in time: an instance
    that also decodes at ``prefill_capacity_share`` of its compute (its decoding waits out every prefill
    chunk, so its p95 TTFT breaks first), a disaggregated prefill instance at ``prefill_only_capacity_share``.
    A disaggregated decode instance prefills nothing; an instance the gateway ejected is no capacity (the
    prefill side of a disaggregated pool is not in the gateway's rotation, so it is never ejected)."""
    ejected = gateway.INSTANCE_STATE.select(state="ejected")

    def each(role_match: str, tokens_per_s: float) -> str:
        prefilling = engine.PROMPT_TOKENS.select(role=role_match)
        return (f"(group by (model, instance) ({prefilling})\n"
                f"  unless on (model, instance) ({ejected} == 1)) * {num(tokens_per_s)}")

    decoding_too = each(f"!~{EngineRole.DECODE}|{EngineRole.PREFILL}", limits.prefill_capacity_tokens_per_s)
    prefill_only = each(str(EngineRole.PREFILL), limits.prefill_only_capacity_tokens_per_s)
    return f"sum by (model) (\n  {decoding_too}\n  or {prefill_only}\n)"


def _engine_ttft_roles() -> str:
    """Each instance's role, from its engine TTFT series: one series per (model, instance, pool, role)."""
    return f"group by (model, instance, pool, role) ({engine.TTFT.count()})"


def engine_ttft_bounds() -> str:
    """The engine TTFT buckets' bounds as values, one series per ``le`` (PromQL cannot read a label as
    a number): joined on ``le``, they say which buckets lie over the breaker line."""
    return "\nor ".join(f'label_replace(vector({b!r}), "le", "{le(b)}", "", "")' for b in engine.TTFT.buckets)


def _model_role_median() -> str:
    with_role = f"({ENGINE_TTFT_P99_BY_INSTANCE} * on (model, instance, pool) group_left (role) {_engine_ttft_roles()})"
    return (f"quantile by (model, role) (0.5, {with_role})\n"
            f"and on (model, role) count by (model, role) {with_role} >= {MIN_PEERS}")


def engine_ttft_peers() -> str:
    """The median instance p99 an instance is judged against, per model and pool: its own pool's
    when the pool has MIN_PEERS instances serving, else that of the model's instances of its role."""
    own = ENGINE_TTFT_P99_BY_INSTANCE
    return (f"({ENGINE_TTFT_P99_POOL_MEDIAN} and on (model, pool) count by (model, pool) ({own}) >= {MIN_PEERS})\n"
            f"or on (model, pool)\n"
            f"max by (model, pool) (group by (model, pool, role) ({_engine_ttft_roles()})\n"
            f"  * on (model, role) group_left () {ENGINE_TTFT_P99_MODEL_ROLE_MEDIAN})")


def engine_ttft_over_line() -> str:
    """Per instance: the share of its requests (5m) slower than the first bucket bound at or over its
    pool's breaker line. Over 1% means its p99 is over the line, read exactly at a bound."""
    by = "model, instance, pool"
    buckets = f"sum by ({by}, le) (rate({engine.TTFT.bucket(le='!=+Inf')}[5m]))"
    count = f"sum by ({by}) (rate({engine.TTFT.count()}[5m]))"
    # every bucket bound at or over the line, per instance (value: the bound)
    over_line = (f"(({buckets} * 0 + on (le) group_left () {ENGINE_TTFT_BOUND})\n"
                 f"   >= on (model, pool) group_left () {ENGINE_TTFT_BREAKER_LINE})")
    # the share over the lowest of them is the largest share over any of them
    # ">= 0" drops an instance that served nothing in 5 minutes (NaN)
    return (f"max by ({by}) (\n  (1 - {buckets} / on ({by}) group_left () {count})\n"
            f"  and on ({by}, le) {over_line}) >= 0")


def established_instances(limits: Thresholds) -> str:
    """Instances past their cold start, one series per (model, instance, pool).

    New instances count apart (DESIGN 4: cold-start thrash is its own signal): eight new
    instances ejected while they warm up are not an ejection cascade of the pool.
    """
    state, start = gateway.INSTANCE_STATE.select(), gateway.INSTANCE_START_TIME.select()
    return (f"(group by (model, instance, pool) ({state})\n"
            f" unless on (model, instance, pool) {younger_than(start, limits.cold_start_minutes * 60)})")


def ejected_5m(limits: Thresholds) -> str:
    """Established instances ejected within 5 minutes, a first ejection that created the series included."""
    ejected = f"sum by (model, instance, pool) ({events(gateway.EJECTIONS.select(), '5m')}) > 0"
    return f"({ejected}\n and on (model, instance, pool) {established_instances(limits)})"


def recording_rules(limits: Thresholds) -> list[Recording]:
    state = gateway.INSTANCE_STATE
    return [
        *_quantiles(),
        Recording(TTFT_P95_30M_BY_MODEL, request.TTFT.quantile(0.95, by=("model",), window="30m")),
        # ">= 0" drops an instance that served nothing in 5 minutes (NaN) so it is nobody's peer.
        Recording(ENGINE_TTFT_P99_BY_INSTANCE, f"{engine.TTFT.quantile(0.99, by=INSTANCE_LEVEL)} >= 0"),
        Recording(ENGINE_TTFT_P99_POOL_MEDIAN, f"quantile by (model, pool) (0.5, {ENGINE_TTFT_P99_BY_INSTANCE})"),
        Recording(ENGINE_TTFT_P99_MODEL_ROLE_MEDIAN, _model_role_median()),
        Recording(ENGINE_TTFT_P99_PEERS, engine_ttft_peers()),
        Recording(ENGINE_TTFT_BREAKER_LINE, f"clamp_min({num(limits.instance_p99_peer_factor)} * "
                                            f"{ENGINE_TTFT_P99_PEERS}, {num(limits.instance_p99_ttft_seconds)})"),
        Recording(ENGINE_TTFT_BOUND, engine_ttft_bounds()),
        Recording(ENGINE_TTFT_OVER_LINE, engine_ttft_over_line()),
        Recording(GATEWAY_QUEUE_SUM, f"sum by (model, pool) ({gateway.QUEUE_DEPTH.select()})"),
        Recording(GATEWAY_QUEUE_AVG30M, f"avg_over_time({GATEWAY_QUEUE_SUM}[30m])"),
        Recording(POOL_QUEUE_SUM, added(GATEWAY_QUEUE_SUM,
                                        f"sum by (model, pool) ({engine.REQUESTS_WAITING.select()})")),
        Recording(POOL_QUEUE_AVG30M, f"avg_over_time({POOL_QUEUE_SUM}[30m])"),
        Recording(QUEUE_WAIT_MEASURED_30M, queue_wait_measured()),
        Recording(QUEUE_DRAIN_30M, queue_drain()),
        Recording(QUEUE_WAIT_30M, larger(QUEUE_WAIT_MEASURED_30M, QUEUE_DRAIN_30M)),
        Recording(INSTANCE_QUEUE_SUM, f"sum by (model, pool, instance) ({engine.REQUESTS_WAITING.select()})"),
        Recording(MODEL_QUEUE_SUM, f"sum by (model) ({engine.REQUESTS_WAITING.select()})"),
        Recording(MODEL_QUEUE_AVG30M, f"avg_over_time({MODEL_QUEUE_SUM}[30m])"),
        Recording(NODE_QUEUE_SUM, f"sum by (node) ({engine.REQUESTS_WAITING.select()})"),
        Recording(IN_FLIGHT_SUM, f"sum by (model) ({request.IN_FLIGHT.select()})"),
        Recording(SERVING_INSTANCES, f"count by (model) ({state.select(state='!=ejected')} == 1)"),
        Recording(IN_FLIGHT_CAPACITY_RATIO, f"{IN_FLIGHT_SUM} / on (model) ({in_flight_capacity(limits)})"),
        Recording(PREFILL_TOKENS_RATE, prefill_tokens_rate()),
        Recording(PREFILL_CAPACITY, prefill_capacity(limits)),
        Recording(PREFILL_CAPACITY_RATIO, f"{PREFILL_TOKENS_RATE} / on (model) {PREFILL_CAPACITY}"),
        Recording(DEMAND_CAPACITY_RATIO, larger(IN_FLIGHT_CAPACITY_RATIO, PREFILL_CAPACITY_RATIO)),
        Recording(RETRIES_PER_REQUEST, retries_per_request()),
        # Per model and pool: 300 healthy instances of another model must not dilute a cascade.
        # "or 0 * count": a healthy pool reads 0, not "no data".
        Recording(EJECTED_COUNT, f"count by (model, pool) {ejected_5m(limits)}\n"
                                 f"or 0 * count by (model, pool) {established_instances(limits)}"),
        Recording(EJECTED_SHARE, f"(count by (model, pool) {ejected_5m(limits)}\n"
                                 f"or 0 * count by (model, pool) {established_instances(limits)})\n"
                                 f"/ count by (model, pool) {established_instances(limits)}\n"
                                 # a pool whose instances are all in their cold start reads 0 too
                                 f"or 0 * count by (model, pool) (group by (model, instance, pool) "
                                 f"({gateway.INSTANCE_STATE.select()}))"),
        Recording(REJECTION_RATIO, ratio(request.REJECTIONS.rate(), request.REQUESTS.rate(), ("model",))),
        Recording(PREFIX_HIT_RATIO,
                  ratio(engine.PREFIX_CACHE_HITS.rate(), engine.PREFIX_CACHE_QUERIES.rate(), ("model",))),
        Recording(CACHED_INPUT_RATIO,
                  ratio(request.CACHED_INPUT_TOKENS.rate(), request.INPUT_TOKENS.rate(), INSTANCE_LEVEL)),
        Recording(BANDWIDTH_AVG5M,
                  f"avg by (node, gpu) (avg_over_time({gpu.MEMORY_BANDWIDTH_UTILIZATION.select()}[5m]))"),
        Recording(SM_ACTIVITY_AVG5M, f"avg by (node, gpu) (avg_over_time({gpu.SM_ACTIVITY.select()}[5m]))"),
        *_slo_errors(limits),
    ]

"""The numbers alerts compare against: the config's SLO and thresholds plus the capacity model.

Everything a rule needs is resolved and checked here once, so a setting that would make an alert
meaningless (one that could never fire, or fires on nothing) is refused with a clear message
instead of producing a rule file that looks fine and stays silent forever.
"""

from __future__ import annotations

from dataclasses import dataclass

from infersight.capacity import plan
from infersight.config import Config
from infersight.signals import request

# The fast-burn page (1h/5m at 14.4x) needs an error budget under 1/14.4 to be able to fire.
FAST_BURN = 14.4
MIN_COLD_START_MINUTES = 5  # the cold-start rule looks at 5-minute rates inside this window


class AlertsConfigError(ValueError):
    """A config value that would produce rules that cannot work; the message says how to fix it."""


@dataclass(frozen=True)
class Limits:
    cluster: str
    runbook_base_url: str
    # SLO
    ttft_slo_seconds: float
    error_budget: float  # 1 - objective
    ttft_p95_target_seconds: float
    rising_share: float
    # scale-out
    gateway_queue_depth: float
    forecast_hours: float
    forecast_min_demand_share: float
    requests_per_instance: int  # capacity model: concurrent requests one instance serves at the target rate
    target_tokens_per_s: float
    # circuit breaker
    instance_p99_ttft_seconds: float
    retry_ratio: float
    ejection_share: float
    flaps_per_15m: float
    cold_start_minutes: float
    cold_cache_hit_ratio: float
    # overload and saturation
    rejection_ratio: float
    bandwidth_saturation: float
    compute_low: float
    kv_usage_near_full: float
    prefix_hit_collapse: float
    gpu_temperature_celsius: float
    spans_rejected_ratio: float
    exporter_jobs: str

    @property
    def instance_queue_limit(self) -> int:
        """Twice what an instance can drain: its concurrent requests at the target rate, times two."""
        return 2 * self.requests_per_instance


def limits_from_config(config: Config) -> Limits:
    cap, th, slo = config.capacity, config.thresholds, config.slo
    capacity = plan(cap.model, cap.gpu_spec(), context_tokens=cap.context_tokens,
                    prefill_utilization=cap.prefill_utilization, target_tokens_per_s=cap.target_tokens_per_s,
                    memory_utilization=cap.memory_utilization)
    if capacity.max_concurrent_requests_at_target < 1:
        raise AlertsConfigError(
            f"capacity model: {cap.model.name} on {cap.gpu} serves no request at "
            f"{cap.target_tokens_per_s:g} tok/s with {cap.context_tokens} tokens of context, so the overload and "
            "forecast alerts have no capacity to compare with; lower capacity.target_tokens_per_s or "
            "capacity.context_tokens, or pick a larger capacity.gpu")
    budget = round(1 - slo.ttft_objective, 12)
    if budget * FAST_BURN >= 1:
        raise AlertsConfigError(
            f"slo.ttft_objective {slo.ttft_objective:g} leaves an error budget of {budget:.1%}: the fast-burn page "
            f"({FAST_BURN}x) could never fire; use an objective above {1 - 1 / FAST_BURN:.3f} (e.g. 0.99)")
    largest = request.TTFT.buckets[-1]
    if th.instance_p99_ttft_seconds >= largest:
        raise AlertsConfigError(
            f"thresholds.instance_p99_ttft_seconds {th.instance_p99_ttft_seconds:g} is not below the largest finite "
            f"bucket of {request.TTFT.name} ({largest:g}s): histogram_quantile never reports more, the alert "
            "could never fire; use a smaller value")
    if slo.ttft_p95_seconds >= largest:
        raise AlertsConfigError(
            f"slo.ttft_p95_seconds {slo.ttft_p95_seconds:g} is not below the largest finite bucket of "
            f"{request.TTFT.name} ({largest:g}s); use a smaller value")
    for key, value in (("thresholds.instance_p99_ttft_seconds", th.instance_p99_ttft_seconds),
                       ("slo.ttft_p95_seconds", slo.ttft_p95_seconds),
                       ("slo.ttft_p95_seconds x thresholds.ttft_slo_share_rising",
                        slo.ttft_p95_seconds * th.ttft_slo_share_rising)):
        if not on_bucket(value, request.TTFT.buckets):
            bounds = ", ".join(f"{b:g}" for b in request.TTFT.buckets)
            raise AlertsConfigError(
                f"{key} is {value:g}, not a bucket bound of {request.TTFT.name}: a histogram alert decides "
                f"exactly only at a bound (between two bounds it interpolates, and fires up to a bucket's "
                f"width late); use one of {bounds}")
    if th.cold_start_minutes < MIN_COLD_START_MINUTES:
        raise AlertsConfigError(
            f"thresholds.cold_start_minutes {th.cold_start_minutes:g} is shorter than the 5-minute rates the "
            f"cold-start alert reads; use {MIN_COLD_START_MINUTES} or more")
    return Limits(
        cluster=config.cluster,
        runbook_base_url=config.alertmanager.runbooks(),
        ttft_slo_seconds=slo.ttft_seconds,
        error_budget=budget,
        ttft_p95_target_seconds=slo.ttft_p95_seconds,
        rising_share=th.ttft_slo_share_rising,
        gateway_queue_depth=th.gateway_queue_depth,
        forecast_hours=th.forecast_hours,
        forecast_min_demand_share=th.forecast_min_demand_share,
        requests_per_instance=capacity.max_concurrent_requests_at_target,
        target_tokens_per_s=cap.target_tokens_per_s,
        instance_p99_ttft_seconds=th.instance_p99_ttft_seconds,
        retry_ratio=th.retry_ratio,
        ejection_share=th.ejection_share,
        flaps_per_15m=th.flaps_per_15m,
        cold_start_minutes=th.cold_start_minutes,
        cold_cache_hit_ratio=th.cold_cache_hit_ratio,
        rejection_ratio=th.rejection_ratio,
        bandwidth_saturation=th.bandwidth_saturation,
        compute_low=th.compute_low,
        kv_usage_near_full=th.kv_usage_near_full,
        prefix_hit_collapse=th.prefix_hit_collapse,
        gpu_temperature_celsius=th.gpu_temperature_celsius,
        spans_rejected_ratio=th.spans_rejected_ratio,
        exporter_jobs=th.exporter_jobs,
    )


def on_bucket(value: float, buckets) -> bool:
    return any(abs(value - b) <= 1e-9 * max(1.0, b) for b in buckets)


def num(value: float) -> str:
    """A threshold as PromQL and people read it: ``0.144`` rather than ``0.14400000000000002``."""
    text = repr(round(float(value), 10))
    return text[:-2] if text.endswith(".0") else text

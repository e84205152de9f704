"""The numbers alerts and dashboards compare against: one model built from the config.

Like a monitoring mixin's ``_config``: the SLO, every ``thresholds.*`` setting (under its config
name, read through from the config rather than copied), what the capacity model derives, the
burn-rate windows and the job and cluster selectors. Alert rules, recording rules and dashboards
all read this one object, so a threshold is named once, in ``infersight/config.py``.

Everything is resolved and checked here once: a setting that would make an alert meaningless
(one that could never fire, or fires on nothing) is refused with a clear message instead of
producing a rule file that looks fine and stays silent forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infersight.capacity import plan
from infersight.config import Config
from infersight.signals import engine, request


@dataclass(frozen=True)
class BurnWindow:
    """One multi-window burn-rate condition: the budget burns ``factor`` x over ``long``, confirmed over ``short``."""

    long: str
    short: str
    factor: float


# The SRE workbook's recipe: page at 14.4x over 1h (5m) or 6x over 6h (30m); ticket at 3x over 1d
# (2h) or 1x over 3d (6h).
PAGE_BURN = (BurnWindow("1h", "5m", 14.4), BurnWindow("6h", "30m", 6.0))
TICKET_BURN = (BurnWindow("1d", "2h", 3.0), BurnWindow("3d", "6h", 1.0))
_SECONDS = {"m": 60, "h": 3600, "d": 86400}
# Every window a burn condition reads: the recording rules record the SLO error ratio over each.
BURN_WINDOWS = tuple(sorted({w for b in PAGE_BURN + TICKET_BURN for w in (b.long, b.short)},
                            key=lambda w: int(w[:-1]) * _SECONDS[w[-1]]))
# The fast-burn page needs an error budget under 1/14.4 to be able to fire.
FAST_BURN = PAGE_BURN[0].factor
MIN_COLD_START_MINUTES = 5  # the cold-start rule looks at 5-minute rates inside this window
SCRAPE_UP = "up"  # Prometheus' own per-target health series


class ThresholdsError(ValueError):
    """A config value that would produce rules that cannot work; the message says how to fix it."""


@dataclass(frozen=True)
class Thresholds:
    """Read ``thresholds.*`` under their config names (``t.gateway_queue_depth``); the rest is below."""

    config: Config
    requests_per_instance: int  # capacity model: concurrent requests one instance serves at the target rate
    prefill_tokens_per_instance: float  # capacity model: prompt tokens/s one instance prefills (compute-bound)
    page_burn: tuple[BurnWindow, ...] = PAGE_BURN
    ticket_burn: tuple[BurnWindow, ...] = TICKET_BURN

    def __getattr__(self, name: str) -> Any:
        # Only called for names not found above: the thresholds section's settings, as the config names them.
        if name.startswith("_") or name == "config":
            raise AttributeError(name)
        try:
            return getattr(self.config.thresholds, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__} has no {name!r} (nor has config.thresholds)") from None

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(type(self.config.thresholds).model_fields))

    # -- the SLO and the capacity model ---------------------------------------------------
    @property
    def ttft_slo_seconds(self) -> float:
        return self.config.slo.ttft_seconds

    @property
    def error_budget(self) -> float:
        """1 - the TTFT objective, rounded so that 0.99 gives exactly 0.01."""
        return round(1 - self.config.slo.ttft_objective, 12)

    @property
    def ttft_p95_target_seconds(self) -> float:
        return self.config.slo.ttft_p95_seconds

    @property
    def target_tokens_per_s(self) -> float:
        return self.config.capacity.target_tokens_per_s

    @property
    def rising_ttft_bar_seconds(self) -> float:
        """The scale-out bar: p95 TTFT over this share of its target (and rising) asks for instances."""
        return self.config.thresholds.ttft_slo_share_rising * self.config.slo.ttft_p95_seconds

    @property
    def queue_wait_bar_seconds(self) -> float:
        """The scale-out queue bar: requests' mean wait in the queues over this asks for instances."""
        return self.config.thresholds.queue_wait_slo_share * self.config.slo.ttft_p95_seconds

    @property
    def prefill_capacity_tokens_per_s(self) -> float:
        """Prompt tokens/s one instance prefills with p95 TTFT still within target (the forecast's capacity)."""
        return self.config.thresholds.prefill_capacity_share * self.prefill_tokens_per_instance

    @property
    def prefill_only_capacity_tokens_per_s(self) -> float:
        """The same for a disaggregated prefill instance (it decodes nothing, so it runs fuller)."""
        return self.config.thresholds.prefill_only_capacity_share * self.prefill_tokens_per_instance

    @property
    def instance_queue_limit(self) -> int:
        """Twice what an instance can drain: its concurrent requests at the target rate, times two."""
        return 2 * self.requests_per_instance

    # -- selectors and where the alerts point ---------------------------------------------
    @property
    def cluster(self) -> str:
        return self.config.cluster

    @property
    def runbook_base_url(self) -> str:
        return self.config.alertmanager.runbooks()

    @property
    def exporter_up(self) -> str:
        """Prometheus' ``up`` of the jobs that scrape infersight's exporters (``thresholds.exporter_jobs``)."""
        return f'{SCRAPE_UP}{{job=~"{self.config.thresholds.exporter_jobs}"}}'


def thresholds_from_config(config: Config) -> Thresholds:
    """The model for ``config``; raises :class:`ThresholdsError` for a setting no alert could work with."""
    cap, th, slo = config.capacity, config.thresholds, config.slo
    capacity = plan(cap.model, cap.gpu_spec(), context_tokens=cap.context_tokens,
                    prefill_utilization=cap.prefill_utilization, target_tokens_per_s=cap.target_tokens_per_s,
                    memory_utilization=cap.memory_utilization)
    if capacity.max_concurrent_requests_at_target < 1:
        raise ThresholdsError(
            f"capacity model: {cap.model.name} on {cap.gpu} serves no request at "
            f"{cap.target_tokens_per_s:g} tok/s with {cap.context_tokens} tokens of context, so the overload and "
            "forecast alerts have no capacity to compare with; lower capacity.target_tokens_per_s or "
            "capacity.context_tokens, or pick a larger capacity.gpu")
    budget = round(1 - slo.ttft_objective, 12)
    if budget * FAST_BURN >= 1:
        raise ThresholdsError(
            f"slo.ttft_objective {slo.ttft_objective:g} leaves an error budget of {budget:.1%}: the fast-burn page "
            f"({FAST_BURN}x) could never fire; use an objective above {1 - 1 / FAST_BURN:.3f} (e.g. 0.99)")
    largest = request.TTFT.buckets[-1]
    if th.instance_p99_ttft_seconds >= largest:
        raise ThresholdsError(
            f"thresholds.instance_p99_ttft_seconds {th.instance_p99_ttft_seconds:g} is not below the largest finite "
            f"bucket of {request.TTFT.name} ({largest:g}s): histogram_quantile never reports more, the alert "
            "could never fire; use a smaller value")
    if slo.ttft_p95_seconds >= largest:
        raise ThresholdsError(
            f"slo.ttft_p95_seconds {slo.ttft_p95_seconds:g} is not below the largest finite bucket of "
            f"{request.TTFT.name} ({largest:g}s); use a smaller value")
    for key, value in (("thresholds.instance_p99_ttft_seconds", th.instance_p99_ttft_seconds),
                       ("slo.ttft_p95_seconds", slo.ttft_p95_seconds),
                       ("slo.ttft_p95_seconds x thresholds.ttft_slo_share_rising",
                        slo.ttft_p95_seconds * th.ttft_slo_share_rising)):
        if not on_bucket(value, request.TTFT.buckets):
            bounds = ", ".join(f"{b:g}" for b in request.TTFT.buckets)
            raise ThresholdsError(
                f"{key} is {value:g}, not a bucket bound of {request.TTFT.name}: a histogram alert decides "
                f"exactly only at a bound (between two bounds it interpolates, and fires up to a bucket's "
                f"width late); use one of {bounds}")
    # The breaker judges the engine's own TTFT (vLLM's buckets, which the collector passes through)
    # and the dashboards draw the floor on the request TTFT too: it must be a bound of both.
    if not on_bucket(th.instance_p99_ttft_seconds, engine.TTFT.buckets):
        common = ", ".join(f"{b:g}" for b in request.TTFT.buckets if on_bucket(b, engine.TTFT.buckets))
        raise ThresholdsError(
            f"thresholds.instance_p99_ttft_seconds is {th.instance_p99_ttft_seconds:g}, not a bucket bound of "
            f"{engine.TTFT.name} (vLLM's own buckets): the breaker compares an instance's engine-side p99 with "
            f"it, and between two bounds it interpolates; use one of {common}")
    if th.cold_start_minutes < MIN_COLD_START_MINUTES:
        raise ThresholdsError(
            f"thresholds.cold_start_minutes {th.cold_start_minutes:g} is shorter than the 5-minute rates the "
            f"cold-start alert reads; use {MIN_COLD_START_MINUTES} or more")
    config.alertmanager.runbooks()  # a ConfigError now, not while the first rule is written
    return Thresholds(config, requests_per_instance=capacity.max_concurrent_requests_at_target,
                      prefill_tokens_per_instance=capacity.prefill_tokens_per_s)


def on_bucket(value: float, buckets) -> bool:
    return any(abs(value - b) <= 1e-9 * max(1.0, b) for b in buckets)

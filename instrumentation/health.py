"""Gateway health reporting: each upstream instance's state and health checks, as catalog metrics.

    health = GatewayHealth(registry)
    health.instance_started("10.0.0.7:8000", model="llama-3-8b", pool="stable")   # state: cold
    health.health_check("10.0.0.7:8000", ok=True, model="llama-3-8b", pool="stable")
    health.set_state("10.0.0.7:8000", "healthy", model="llama-3-8b", pool="stable")
    health.set_state("10.0.0.7:8000", "ejected", ...)                               # counts an ejection

The alerts read: ``llm_instance_state`` (one-hot by state) for ejection cascades,
``llm_instance_state_transitions_total`` for flapping, ``llm_instance_start_time_seconds`` with
ejections for cold-start thrash, ``llm_health_check_failures_total`` over ``llm_health_checks_total``.

An instance's counters exist at 0 from the moment the gateway first reports it (every state
transition pair, ejections, health checks), as DESIGN 8 asks: a counter whose label set appeared
only at its first event would start at 1, and ``increase()`` reads that first ejection as 0.
"""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry

from infersight.signals import gateway

STATES = gateway.INSTANCE_STATES  # healthy, cold, half_open, ejected
EJECTED = "ejected"


class GatewayHealth:
    """Reports upstream instances' states; safe to call from several threads."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.state = gateway.INSTANCE_STATE.register(registry)
        self.transitions = gateway.STATE_TRANSITIONS.register(registry)
        self.ejections = gateway.EJECTIONS.register(registry)
        self.checks = gateway.HEALTH_CHECKS.register(registry)
        self.check_failures = gateway.HEALTH_CHECK_FAILURES.register(registry)
        self.start_time = gateway.INSTANCE_START_TIME.register(registry)
        self._current: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    def instance_started(self, instance: str, *, model: str = "", pool: str = "",
                         start_time: float | None = None, state: str = "cold") -> None:
        """A (new or restarted) instance joined the pool at ``start_time`` (Unix seconds, default now)."""
        if state not in STATES:
            raise ValueError(f"unknown instance state {state!r}; expected one of {', '.join(STATES)}")
        if not instance:
            raise ValueError("instance must be a non-empty name or host:port")
        self.start_time.labels(model, instance, pool).set(time.time() if start_time is None else start_time)
        self.set_state(instance, state, model=model, pool=pool)

    def set_state(self, instance: str, state: str, *, model: str = "", pool: str = "") -> str | None:
        """Record ``instance``'s state; returns the previous one (None if first seen).

        A change counts a transition; a change *to* ``ejected`` also counts an ejection.
        Reporting the same state again changes nothing.
        """
        if state not in STATES:
            raise ValueError(f"unknown instance state {state!r}; expected one of {', '.join(STATES)}")
        if not instance:
            raise ValueError("instance must be a non-empty name or host:port")
        key = (model, instance, pool)
        with self._lock:
            previous = self._current.get(key)
            if previous == state:
                return previous
            if previous is None:
                self._create_counters(model, instance, pool)
            self._current[key] = state
            for candidate in STATES:
                self.state.labels(model, instance, pool, candidate).set(1.0 if candidate == state else 0.0)
            if previous is not None:
                self.transitions.labels(model, instance, pool, previous, state).inc()
            if state == EJECTED:
                self.ejections.labels(model, instance, pool).inc()
        return previous

    def _create_counters(self, model: str, instance: str, pool: str) -> None:
        """Every counter of a newly seen instance, at 0 (labels() creates a child at 0)."""
        for source in STATES:
            for target in STATES:
                if source != target:
                    self.transitions.labels(model, instance, pool, source, target)
        self.ejections.labels(model, instance, pool)
        self.checks.labels(model, instance, pool)
        self.check_failures.labels(model, instance, pool)

    def health_check(self, instance: str, ok: bool, *, model: str = "", pool: str = "") -> None:
        """One health-check result for ``instance``."""
        if not instance:
            raise ValueError("instance must be a non-empty name or host:port")
        self.checks.labels(model, instance, pool).inc()
        if not ok:
            self.check_failures.labels(model, instance, pool).inc()

    def current_state(self, instance: str, *, model: str = "", pool: str = "") -> str | None:
        return self._current.get((model, instance, pool))

    def remove(self, instance: str, *, model: str = "", pool: str = "") -> None:
        """The instance left the pool for good: its state and start-time series disappear.

        Counters are kept (their history matters to rate()), as Prometheus practice goes.
        """
        with self._lock:
            if self._current.pop((model, instance, pool), None) is None:
                return
            for candidate in STATES:
                self.state.remove(model, instance, pool, candidate)
        try:
            self.start_time.remove(model, instance, pool)
        except KeyError:
            pass

"""Gateway health reporting: instance states, transitions, ejections, health checks, start time."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from infersight.instrumentation import GatewayHealth
from infersight.signals import gateway

WHERE = dict(model="llama-3-70b", pool="stable")


def value(registry, signal, **labels):
    return registry.get_sample_value(signal.name, labels)


def test_life_of_an_instance():
    registry = CollectorRegistry()
    health = GatewayHealth(registry)
    health.instance_started("gpu-node-3:8000", start_time=1_700_000_000.0, **WHERE)
    labels = dict(instance="gpu-node-3:8000", **WHERE)
    assert value(registry, gateway.INSTANCE_START_TIME, **labels) == 1_700_000_000.0
    assert value(registry, gateway.INSTANCE_STATE, state="cold", **labels) == 1

    for state in ("healthy", "half_open", "healthy", "ejected", "cold", "healthy"):
        health.set_state("gpu-node-3:8000", state, **WHERE)
    health.set_state("gpu-node-3:8000", "healthy", **WHERE)  # unchanged: no transition

    states = {s: value(registry, gateway.INSTANCE_STATE, state=s, **labels) for s in gateway.INSTANCE_STATES}
    assert states == {"healthy": 1.0, "cold": 0.0, "half_open": 0.0, "ejected": 0.0}
    assert value(registry, gateway.STATE_TRANSITIONS, from_state="healthy", to_state="half_open", **labels) == 1
    assert value(registry, gateway.STATE_TRANSITIONS, from_state="cold", to_state="healthy", **labels) == 2
    assert value(registry, gateway.STATE_TRANSITIONS, from_state="healthy", to_state="ejected", **labels) == 1
    assert value(registry, gateway.EJECTIONS, **labels) == 1
    assert health.current_state("gpu-node-3:8000", **WHERE) == "healthy"


def test_health_checks_count_failures():
    registry = CollectorRegistry()
    health = GatewayHealth(registry)
    for ok in (True, False, False, True):
        health.health_check("e0", ok, **WHERE)
    assert value(registry, gateway.HEALTH_CHECKS, instance="e0", **WHERE) == 4
    assert value(registry, gateway.HEALTH_CHECK_FAILURES, instance="e0", **WHERE) == 2


def test_ejection_cascade_is_visible_as_a_share():
    registry = CollectorRegistry()
    health = GatewayHealth(registry)
    for i in range(10):
        health.instance_started(f"e{i}", state="healthy", **WHERE)
    for i in range(4):
        health.set_state(f"e{i}", "ejected", **WHERE)
    ejected = sum(value(registry, gateway.INSTANCE_STATE, instance=f"e{i}", state="ejected", **WHERE)
                  for i in range(10))
    assert ejected / 10 == 0.4


def test_removed_instance_disappears_but_counters_stay():
    registry = CollectorRegistry()
    health = GatewayHealth(registry)
    health.instance_started("e0", **WHERE)
    health.set_state("e0", "ejected", **WHERE)
    health.remove("e0", **WHERE)
    health.remove("e0", **WHERE)  # twice is harmless
    assert value(registry, gateway.INSTANCE_STATE, instance="e0", state="ejected", **WHERE) is None
    assert value(registry, gateway.INSTANCE_START_TIME, instance="e0", **WHERE) is None
    assert value(registry, gateway.EJECTIONS, instance="e0", **WHERE) == 1


def test_bad_state_is_refused_and_changes_nothing():
    registry = CollectorRegistry()
    health = GatewayHealth(registry)
    health.set_state("e0", "healthy", **WHERE)
    with pytest.raises(ValueError, match="healthy, cold, half_open, ejected"):
        health.set_state("e0", "on_fire", **WHERE)
    with pytest.raises(ValueError, match="instance"):
        health.set_state("", "healthy", **WHERE)
    with pytest.raises(ValueError, match="instance"):
        health.health_check("", ok=False, **WHERE)
    with pytest.raises(ValueError, match="unknown instance state"):
        health.instance_started("e1", state="warm", **WHERE)
    assert health.current_state("e0", **WHERE) == "healthy"
    assert value(registry, gateway.INSTANCE_STATE, instance="e0", state="healthy", **WHERE) == 1
    assert value(registry, gateway.INSTANCE_START_TIME, instance="e1", **WHERE) is None  # refused before any write


def test_a_new_instance_has_every_counter_at_zero_before_its_first_event():
    """DESIGN 8: the first ejection or transition must be an increase from 0, visible to increase()."""
    registry = CollectorRegistry()
    health = GatewayHealth(registry)
    health.instance_started("10.0.0.9:8000", **WHERE)
    labels = dict(instance="10.0.0.9:8000", **WHERE)
    assert value(registry, gateway.EJECTIONS, **labels) == 0
    assert value(registry, gateway.HEALTH_CHECKS, **labels) == 0
    assert value(registry, gateway.HEALTH_CHECK_FAILURES, **labels) == 0
    pairs = [(a, b) for a in gateway.INSTANCE_STATES for b in gateway.INSTANCE_STATES if a != b]
    assert [value(registry, gateway.STATE_TRANSITIONS, from_state=a, to_state=b, **labels) for a, b in pairs] == [
        0] * len(pairs)
    health.set_state("10.0.0.9:8000", "ejected", **WHERE)
    assert value(registry, gateway.EJECTIONS, **labels) == 1
    assert value(registry, gateway.STATE_TRANSITIONS, from_state="cold", to_state="ejected", **labels) == 1

"""Turn the sampler's last snapshot into catalog series: (signal, label values, value).

Both outputs use this one mapping: the Prometheus exposition (``collector.py``) and the OTLP
push (``otlp.py``). Label values come in the order of ``signal.labels``. A device that is down,
or a snapshot that is stale, yields ``gpu_up 0`` and no readings: never stale numbers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from infersight.collectors.gpu.readings import Backend, DeviceIdentity, DeviceReading
from infersight.collectors.gpu.sampler import Sampler
from infersight.signals import gpu
from infersight.signals.catalog import Signal

Series = tuple[Signal, tuple[str, ...], float]

# Reading attribute -> signal, for the fields that are one number per device.
SCALAR_FIELDS: tuple[tuple[str, Signal], ...] = (
    ("utilization", gpu.UTILIZATION),
    ("memory_busy", gpu.MEMORY_BUSY),
    ("memory_used_bytes", gpu.MEMORY_USED),
    ("memory_total_bytes", gpu.MEMORY_TOTAL),
    ("power_watts", gpu.POWER),
    ("power_limit_watts", gpu.POWER_LIMIT),
    ("energy_joules", gpu.ENERGY),
    ("temperature_celsius", gpu.TEMPERATURE),
    ("sm_clock_hertz", gpu.SM_CLOCK),
    ("memory_clock_hertz", gpu.MEMORY_CLOCK),
    ("sm_activity", gpu.SM_ACTIVITY),
    ("sm_occupancy", gpu.SM_OCCUPANCY),
    ("tensor_activity", gpu.TENSOR_ACTIVITY),
)
# Reading attribute holding {label value: number} -> signal (its last label takes the key).
KEYED_FIELDS: tuple[tuple[str, Signal], ...] = (
    ("ecc_errors", gpu.ECC_ERRORS),
    ("pcie_bytes_per_second", gpu.PCIE_THROUGHPUT),
    ("nvlink_bytes_per_second", gpu.NVLINK_THROUGHPUT),
)


@dataclass
class ExporterHealth:
    """What the exporter knows about itself beyond the sampler: filled in as it runs."""

    last_scrape_seconds: float | None = None
    otlp_exports: dict[str, int] = field(default_factory=dict)  # result -> count


def device_labels(node: str, identity: DeviceIdentity) -> tuple[str, str, str, str]:
    """Values for gpu.DEVICE_LABELS: node, gpu, uuid, gpu_model."""
    return (node, str(identity.index), identity.uuid, identity.name)


def reading_series(labels: tuple[str, ...], reading: DeviceReading) -> Iterator[Series]:
    for attribute, signal in SCALAR_FIELDS:
        value = getattr(reading, attribute)
        if value is not None:
            yield signal, labels, float(value)
    if reading.bandwidth_utilization is not None:
        yield gpu.MEMORY_BANDWIDTH_UTILIZATION, (*labels, reading.bandwidth_source), reading.bandwidth_utilization
    if reading.clock_events is not None:
        for reason, active in reading.clock_events.items():
            yield gpu.CLOCK_EVENT, (*labels, reason), 1.0 if active else 0.0
    for attribute, signal in KEYED_FIELDS:
        values = getattr(reading, attribute)
        if values is not None:
            for key, value in values.items():
                yield signal, (*labels, key), float(value)


def all_series(sampler: Sampler, backend: Backend, node: str, health: ExporterHealth,
               now: float | None = None) -> Iterator[Series]:
    """Every series the GPU exporter exposes, from the last snapshot."""
    now = time.monotonic() if now is None else now
    snapshot = sampler.snapshot
    stale = sampler.is_stale(now)
    readings = snapshot.readings if snapshot is not None and not stale else ()
    answered = {r.identity.index: r for r in readings if isinstance(r, DeviceReading)}
    for identity in sampler.devices:
        labels = device_labels(node, identity)
        yield gpu.INFO, (*labels, backend.driver_version), 1.0
        reading = answered.get(identity.index)
        yield gpu.UP, labels, 1.0 if reading is not None else 0.0
        if reading is not None:
            yield from reading_series(labels, reading)
    # XID counts are the collector's own tally of events, so they stay when a GPU is down:
    # XID 79 is exactly what an on-call engineer needs to see next to gpu_up 0.
    # Known codes are exposed at 0 before their first event (gpu.KNOWN_XIDS), so increase() sees it.
    counts = backend.xid_counts()
    for identity in sampler.devices:
        labels = device_labels(node, identity)
        xids = {int(xid): 0 for xid in gpu.KNOWN_XIDS} | counts.get(identity.index, {})
        for xid, count in sorted(xids.items()):
            yield gpu.XID_ERRORS, (*labels, str(xid)), float(count)
    yield from health_series(sampler, backend, node, health, now)


def health_series(sampler: Sampler, backend: Backend, node: str, health: ExporterHealth,
                  now: float) -> Iterator[Series]:
    yield gpu.COLLECTOR_DEVICES, (node, backend.name), float(len(sampler.devices))
    yield gpu.COLLECTOR_SAMPLES, (node,), float(sampler.samples_total)
    snapshot = sampler.snapshot
    if snapshot is not None:
        yield gpu.COLLECTOR_SAMPLE_DURATION, (node,), snapshot.duration_seconds
        yield gpu.COLLECTOR_SAMPLE_AGE, (node,), max(0.0, now - snapshot.taken_at)
    if health.last_scrape_seconds is not None:
        yield gpu.COLLECTOR_SCRAPE_DURATION, (node,), health.last_scrape_seconds
    for (index, call), count in sorted(backend.errors.counts.items()):
        yield gpu.COLLECTOR_ERRORS, (node, index, call), float(count)
    for result, count in sorted(health.otlp_exports.items()):
        yield gpu.COLLECTOR_OTLP_EXPORTS, (node, result), float(count)


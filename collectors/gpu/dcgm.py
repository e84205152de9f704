"""dcgm-exporter's exposition -> one :class:`DeviceReading` per GPU, in base units.

NVIDIA's dcgm-exporter (github.com/NVIDIA/dcgm-exporter) already runs on most GPU nodes. Its
series are named after DCGM fields (``DCGM_FI_*``) with the GPU's identity in labels (``gpu``,
``UUID``, ``modelName``, ``hostname``, ``DCGM_FI_DRIVER_VERSION``; ``pod``/``namespace``/
``container`` from its Kubernetes pod mapper). This module maps them onto the same reading the
NVML backend produces, so that ``series.py`` turns both into the same catalog series.

DCGM field names appear only here. Where a field was renamed, the current name comes first. A
field the exporter does not export is absent from the reading (``None``), never 0: the default
counters (``etc/default-counters.csv``) lack SM activity, ECC and throttle reasons, and the
series (and the alerts on them) are then absent. ``collectors/gpu/README.md`` has the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from infersight.collectors.exposition_lines import lines_named
from infersight.collectors.gpu.readings import CLOCK_EVENT_REASONS, SOURCE_DCGM, DeviceIdentity, DeviceReading

MIB = 1024 * 1024


# Unit conversions to base units (divisions where the factor is 1/n, so 55491669881 mJ stays exact).
def _same(v: float) -> float:
    return v


def _percent(v: float) -> float:
    return v / 100


def _milli(v: float) -> float:
    return v / 1000


def _mega(v: float) -> float:
    return v * 1e6


def _mib(v: float) -> float:
    return v * MIB


Convert = Callable[[float], float]
# (reading attribute, DCGM fields current name first, conversion to base units)
SCALAR_FIELDS: tuple[tuple[str, tuple[str, ...], Convert], ...] = (
    ("utilization", ("DCGM_FI_DEV_GPU_UTIL",), _percent),  # percent
    ("memory_busy", ("DCGM_FI_DEV_MEM_COPY_UTIL",), _percent),  # percent
    ("bandwidth_utilization", ("DCGM_FI_PROF_DRAM_ACTIVE",), _same),  # ratio of cycles the DRAM interface is busy
    ("memory_used_bytes", ("DCGM_FI_DEV_FB_USED",), _mib),
    ("memory_total_bytes", ("DCGM_FI_DEV_FB_TOTAL",), _mib),  # not a default counter: see _memory_total
    ("power_watts", ("DCGM_FI_DEV_POWER_USAGE",), _same),
    ("power_limit_watts", ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT"), _same),
    ("energy_joules", ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",), _milli),  # mJ
    ("temperature_celsius", ("DCGM_FI_DEV_GPU_TEMP",), _same),
    ("sm_clock_hertz", ("DCGM_FI_DEV_SM_CLOCK",), _mega),  # MHz
    ("memory_clock_hertz", ("DCGM_FI_DEV_MEM_CLOCK",), _mega),  # MHz
    ("sm_activity", ("DCGM_FI_PROF_SM_ACTIVE",), _same),
    ("sm_occupancy", ("DCGM_FI_PROF_SM_OCCUPANCY",), _same),
    ("tensor_activity", ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",), _same),
)
# (reading attribute holding {key: value}, key, DCGM fields, conversion)
KEYED_FIELDS: tuple[tuple[str, str, tuple[str, ...], Convert], ...] = (
    ("pcie_bytes_per_second", "rx", ("DCGM_FI_PROF_PCIE_RX_BYTES",), _same),  # a rate in bytes/s (DCP field)
    ("pcie_bytes_per_second", "tx", ("DCGM_FI_PROF_PCIE_TX_BYTES",), _same),
    ("nvlink_bytes_per_second", "rx", ("DCGM_FI_PROF_NVLINK_RX_BYTES",), _same),
    ("nvlink_bytes_per_second", "tx", ("DCGM_FI_PROF_NVLINK_TX_BYTES",), _same),
    ("ecc_errors", "corrected", ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",), _same),  # volatile, as NVML's
    ("ecc_errors", "uncorrected", ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",), _same),
)
FB_PARTS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
# The clock-event (throttle) reason bitmask; bit i is CLOCK_EVENT_REASONS[i], as in NVML.
CLOCK_EVENT_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
# A gauge holding the code of the last XID the GPU raised (0: none), not a count.
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"

# Label names across dcgm-exporter versions (--use-old-namespace, older templates), current first.
UUID_LABELS = ("UUID", "uuid")
MODEL_LABELS = ("modelName", "model_name")
HOST_LABELS = ("hostname", "Hostname")
POD_LABELS = {"namespace": ("namespace", "pod_namespace"), "pod": ("pod", "pod_name"),
              "container": ("container", "container_name")}
MIG_INSTANCE_LABEL = "GPU_I_ID"
# Series of other entities that also carry a gpu label (the link template writes gpu and gpu_uuid).
OTHER_ENTITY_LABELS = ("nvlink", "nvswitch", "cpucore")

WANTED = frozenset({name for _a, names, _f in SCALAR_FIELDS for name in names}
                   | {name for _a, _k, names, _f in KEYED_FIELDS for name in names}
                   | set(FB_PARTS) | set(CLOCK_EVENT_FIELDS) | {XID_FIELD})


class DcgmFormatError(ValueError):
    """The text is not a usable dcgm-exporter exposition; the message says why."""


@dataclass
class DcgmGPU:
    """One GPU as a dcgm-exporter scrape shows it."""

    node: str
    identity: DeviceIdentity
    driver_version: str = ""
    reading: DeviceReading | None = None
    last_xid: int | None = None  # None: the exporter does not export XIDs
    pods: set[tuple[str, str, str]] = field(default_factory=set)  # (namespace, pod, container)
    _values: dict[str, float] = field(default_factory=dict, repr=False)


def _first(labels: dict[str, str], names: Iterable[str]) -> str:
    return next((labels[n] for n in names if labels.get(n)), "")


def _is_blank(value: float) -> bool:
    """DCGM's "no value" sentinels (blank, not found, not supported, not permissioned)."""
    if math.isnan(value) or math.isinf(value):
        return True
    for blank, span in ((0x7FFFFFF0, 16), (0x7FFFFFFFFFFFFFF0, 16), (140737488355328.0, 8)):
        if blank <= value < blank + span:
            return True
    return False


# Every name a line of a wanted field can start with (counters' samples may carry _total). Only those
# lines are parsed: the default counters hold a third of fields we do not map (encoder, decoder,
# remapped rows, vGPU licence ...).
_LINE_NAMES = frozenset(WANTED | {name + "_total" for name in WANTED})


def parse(text: str, node: str = "") -> list[DcgmGPU]:
    """The GPUs of one dcgm-exporter scrape, in index order.

    ``node`` overrides the exporter's ``hostname`` label (and stands in where it has none).
    Samples of MIG instances (``GPU_I_ID`` set) are not mapped: the catalog's series are per GPU.
    """
    try:
        families = list(text_string_to_metric_families(lines_named(text, _LINE_NAMES)))
        if not families:
            list(text_string_to_metric_families(text))  # garbage says so, rather than "no GPUs"
    except (ValueError, IndexError, TypeError) as exc:
        raise DcgmFormatError(f"invalid Prometheus text: {exc}"[:300]) from None
    gpus: dict[tuple[str, int], DcgmGPU] = {}
    for family in families:
        # The family's name is the DCGM field (the parser appends _total to counters' sample names).
        name = family.name
        if not name.startswith("DCGM_"):
            continue
        for sample in family.samples:
            labels = sample.labels
            index = labels.get("gpu", "")
            if not index.isdigit() or any(label in labels for label in OTHER_ENTITY_LABELS):
                continue  # NVSwitch, NVLink and CPU entities: not a GPU's own series
            gpu_node = node or _first(labels, HOST_LABELS)
            key = (gpu_node, int(index))
            entry = gpus.get(key)
            if entry is None:
                identity = DeviceIdentity(int(index), _first(labels, UUID_LABELS), _first(labels, MODEL_LABELS))
                entry = gpus[key] = DcgmGPU(gpu_node, identity)
            elif not entry.identity.uuid and _first(labels, UUID_LABELS):
                entry.identity = DeviceIdentity(int(index), _first(labels, UUID_LABELS), _first(labels, MODEL_LABELS))
            entry.driver_version = entry.driver_version or labels.get(DRIVER_LABEL, "")
            pod = tuple(_first(labels, names) for names in POD_LABELS.values())
            if pod[1]:
                entry.pods.add(pod)
            if labels.get(MIG_INSTANCE_LABEL) or name not in WANTED or _is_blank(sample.value):
                continue
            entry._values.setdefault(name, sample.value)
    for entry in gpus.values():
        entry.reading = _reading(entry.identity, entry._values)
        xid = entry._values.get(XID_FIELD)
        entry.last_xid = None if xid is None else int(xid)
    return [gpus[key] for key in sorted(gpus)]


def _reading(identity: DeviceIdentity, values: dict[str, float]) -> DeviceReading:
    reading = DeviceReading(identity, bandwidth_source=SOURCE_DCGM)
    for attribute, names, factor in SCALAR_FIELDS:
        value = next((values[n] for n in names if n in values), None)
        if value is not None:
            setattr(reading, attribute, factor(value))
    for attribute, key, names, factor in KEYED_FIELDS:
        value = next((values[n] for n in names if n in values), None)
        if value is not None:
            if getattr(reading, attribute) is None:
                setattr(reading, attribute, {})
            getattr(reading, attribute)[key] = factor(value)
    if reading.memory_total_bytes is None and all(n in values for n in FB_PARTS):
        # NVML's v2 memory info, which DCGM reads: total = used + free + reserved.
        reading.memory_total_bytes = _mib(sum(values[n] for n in FB_PARTS))
    mask = next((values[n] for n in CLOCK_EVENT_FIELDS if n in values), None)
    if mask is not None:
        bits = int(mask)
        reading.clock_events = {reason: bool(bits & (1 << i)) for i, reason in enumerate(CLOCK_EVENT_REASONS)}
    return reading

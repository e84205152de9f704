"""GPU health alerts: XID errors, throttling, temperature, uncorrectable ECC, a GPU that stopped answering."""

from __future__ import annotations

import dataclasses

from infersight.alerts.model import Alert, Case, Expected, Series, Severity, SignalClass
from infersight.alerts.promql import events, num
from infersight.alerts.rules.common import gpu_labels, lab, require, val
from infersight.alerts.series import gauge, steps
from infersight.signals import gpu
from infersight.thresholds import Thresholds

SIGNAL = SignalClass.GPU
# XIDs after which the GPU must be drained and reset (gpu.PAGING_XIDS): 48 double-bit ECC error,
# 79 fallen off the bus, 95 uncontained ECC error. Others (13 graphics engine exception, 31 MMU
# fault, ...) are usually one bad kernel or job: a ticket.
CRITICAL_XIDS = gpu.PAGING_XIDS
THROTTLE_REASONS = ("hw_thermal", "sw_thermal", "hw_power_brake", "hw_slowdown")
DEVICE = gpu.DEVICE_LABELS


def xid_errors(limits: Thresholds) -> list[Alert]:
    critical_re = "|".join(CRITICAL_XIDS)
    by = ", ".join((*DEVICE, "xid"))
    # events(): the collector exposes the known codes at 0, but any other code appears at its first
    # event, already at 1, and increase() alone would read that as nothing.
    expr = lambda op: (  # noqa: E731
        f"sum by ({by}) ({events(gpu.XID_ERRORS.select(xid=op + critical_re), '10m')}) > 0")
    description = (f"GPU {lab('gpu')} ({lab('gpu_model')}, {lab('uuid')}) on {lab('node')} raised XID {lab('xid')} "
                   "in the last 10 minutes.")
    page = Alert(name="GPUXidError", expr=expr("=~"), severity=Severity.CRITICAL, signal=SIGNAL,
                 summary="A GPU raised an XID error that needs a drain and reset.", description=description)
    ticket = Alert(name="GPUXidError", expr=expr("!~"), severity=Severity.WARNING, signal=SIGNAL,
                   summary="A GPU raised an XID error.", description=description)

    def xid(code: str, jump_at: int, absent_until_first: bool = False):
        series = steps(gpu.XID_ERRORS, gpu_labels(xid=code), 20, [jump_at])
        if absent_until_first:  # a code the collector does not create at 0: the series starts at 1
            series = Series(series.selector, f"_x{jump_at} 1x{19 - jump_at}")
        return [series]

    page = dataclasses.replace(page, cases=[
        Case("XID 79: fallen off the bus", xid("79", 12), 15, [Expected(gpu_labels(xid="79"))]),
        Case("XID 79 long ago, nothing new", xid("79", 1), 15),
    ])
    ticket = dataclasses.replace(ticket, cases=[
        Case("XID 13 in a kernel", xid("13", 12), 15, [Expected(gpu_labels(xid="13"))]),
        Case("XID 119 (GSP timeout), a code first seen at 1", xid("119", 12, True), 15,
             [Expected(gpu_labels(xid="119"))]),
        Case("XID 13 long ago, nothing new", xid("13", 1), 15),
        Case("XID 119 first seen long ago, nothing new", xid("119", 1, True), 15),
    ])
    return [page, ticket]


def throttled(limits: Thresholds) -> Alert:
    reasons = "|".join(THROTTLE_REASONS)

    def events(thermal_minutes: int):
        return [gauge(gpu.CLOCK_EVENT, gpu_labels(reason="hw_thermal"), [(0, 30 - thermal_minutes),
                                                                         (1, thermal_minutes)]),
                gauge(gpu.CLOCK_EVENT, gpu_labels(reason="sw_power_cap"), [(1, 30)])]

    return Alert(
        name="GPUThrottled",
        expr=f"{gpu.CLOCK_EVENT.select(reason='=~' + reasons)} == 1",
        for_="10m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="A GPU is thermally or power throttled.",
        description=(f"GPU {lab('gpu')} on {lab('node')} has been throttled for 10 minutes ({lab('reason')}): its "
                     "clocks are cut and every request on it decodes slower. Check cooling and power delivery."),
        cases=[
            # minute 29 is the last sample; 20 throttled minutes end there, so the eval at 29 sees 20
            Case("thermal throttling for 20 minutes", events(20), 29, [Expected(gpu_labels(reason="hw_thermal"), 1)]),
            Case("thermal throttling for 9 minutes, power capping (normal under load)", events(9), 29),
        ],
    )


def temperature(limits: Thresholds) -> Alert:
    t = limits.gpu_temperature_celsius
    hot, near = t + 1, t - 1
    require(hot > t > near, "temperatures must straddle the threshold")
    return Alert(
        name="GPUTemperatureHigh",
        expr=f"{gpu.TEMPERATURE.select()} > {num(t)}",
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="A GPU runs hot.",
        description=f"GPU {lab('gpu')} on {lab('node')} is at {val(0)}°C (threshold {num(t)}°C).",
        cases=[
            Case("hot", [gauge(gpu.TEMPERATURE, gpu_labels(), [(hot, 20)])], 15, [Expected(gpu_labels(), hot)]),
            Case("one degree under", [gauge(gpu.TEMPERATURE, gpu_labels(), [(near, 20)])], 15),
        ],
    )


def uncorrectable_ecc(limits: Thresholds) -> Alert:
    def ecc(kind: str, jump_at: int):
        return [steps(gpu.ECC_ERRORS, gpu_labels(type=kind), 20, [jump_at])]

    return Alert(
        name="GPUUncorrectableECCErrors",
        # events(): a GPU whose uncorrected counter first shows up at 1 is caught too.
        expr=f"{events(gpu.ECC_ERRORS.select(type='uncorrected'), '10m')} > 0",
        severity=Severity.CRITICAL,
        signal=SIGNAL,
        summary="A GPU reported uncorrectable ECC errors.",
        description=(f"GPU {lab('gpu')} ({lab('uuid')}) on {lab('node')} reported uncorrectable ECC errors in the "
                     "last 10 minutes: results on it may be wrong. Drain it and reset it (row remapping)."),
        cases=[
            Case("uncorrected error", ecc("uncorrected", 12), 15, [Expected(gpu_labels(type="uncorrected"))]),
            Case("corrected errors only", ecc("corrected", 12), 15),
        ],
    )


def gpu_down(limits: Thresholds) -> Alert:
    def up(down_minutes: int):
        return [gauge(gpu.UP, gpu_labels(), [(1, 20 - down_minutes), (0, down_minutes)])]

    return Alert(
        name="GPUDown",
        expr=f"{gpu.UP.select()} == 0",
        for_="2m",
        severity=Severity.CRITICAL,
        signal=SIGNAL,
        summary="A GPU stopped answering the collector.",
        description=(f"GPU {lab('gpu')} ({lab('uuid')}) on {lab('node')} failed its NVML samples for 2 minutes; "
                     "its other series are gone. Check dmesg for XID 79 and the node's power."),
        cases=[
            Case("down for 5 minutes", up(6), 19, [Expected(gpu_labels(), 0)]),
            Case("down for 1 minute", up(2), 19),
        ],
    )


def alerts(limits: Thresholds) -> list[Alert]:
    return [*xid_errors(limits), throttled(limits), temperature(limits), uncorrectable_ecc(limits), gpu_down(limits)]

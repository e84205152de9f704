"""GPUs: memory bandwidth (what "full" means in inference) next to SM activity, power, energy per token,
temperature, throttling and hardware errors."""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.alerts.limits import Limits
from infersight.collectors.gpu.promql import energy_per_token
from infersight.config import Config
from infersight.dashboards.panels import RATE, Line, Q, dashboard, layout, timeseries, variable
from infersight.signals import gpu

UID = "infersight-gpus"
F = {"node": "=~$node"}
DEVICE = "{{node}}/{{gpu}}"


def _saturation(limits: Limits) -> list[dict]:
    bandwidth = f"max by (node, gpu, source) ({gpu.MEMORY_BANDWIDTH_UTILIZATION.select(**F)})"
    sm = f"max by (node, gpu) ({gpu.SM_ACTIVITY.select(**F)})"
    return [
        timeseries("Memory bandwidth utilization", "percentunit",
                   [Q(bandwidth, DEVICE + " ({{source}})"), Q(f'{rec.BANDWIDTH_AVG5M}{{node=~"$node"}}',
                                                             DEVICE + " 5m mean")],
                   line=Line(limits.bandwidth_saturation), max_value=1, width=12,
                   description="source=gpm: NVML GPM DRAM_BW_UTIL (Hopper and newer); source=nvml_busy: the "
                               "memory-busy time share of older GPUs, not a bandwidth."),
        timeseries("SM activity", "percentunit",
                   [Q(sm, DEVICE), Q(f'{rec.SM_ACTIVITY_AVG5M}{{node=~"$node"}}', DEVICE + " 5m mean")],
                   line=Line(limits.compute_low, below=True), max_value=1, width=12,
                   description="Bandwidth over its line with SM activity under this one: decode is "
                               "bandwidth-bound, more batching will not help."),
    ]


def _power() -> list[dict]:
    power = f"sum by (node, gpu) ({gpu.POWER.select(**F)})"
    limit = f"sum by (node, gpu) ({gpu.POWER_LIMIT.select(**F)})"
    per_node = energy_per_token(RATE, by=("node",), **F)
    fleet = energy_per_token(RATE, by=())
    memory = f"sum by (node, gpu) ({gpu.MEMORY_USED.select(**F)}) / sum by (node, gpu) ({gpu.MEMORY_TOTAL.select(**F)})"
    return [
        timeseries("Power draw and limit", "watt", [Q(power, DEVICE), Q(limit, "limit " + DEVICE)]),
        timeseries("Energy per generated token", "suffix: J/token", [Q(per_node, "{{node}}"), Q(fleet, "fleet")],
                   description="GPU energy rate over the engines' generated-token rate, joined on node."),
        timeseries("Memory used", "percentunit", [Q(memory, DEVICE)], max_value=1),
    ]


def _health(limits: Limits) -> list[dict]:
    temperature = f"max by (node, gpu) ({gpu.TEMPERATURE.select(**F)})"
    throttle = f"sum by (reason) ({gpu.CLOCK_EVENT.select(reason='!=gpu_idle', **F)})"
    xid = f"sum by (node, gpu, xid) (increase({gpu.XID_ERRORS.select(**F)}[1h]))"
    ecc = f"sum by (node, gpu, type) (increase({gpu.ECC_ERRORS.select(**F)}[1h]))"
    up = f"min by (node, gpu) ({gpu.UP.select(**F)})"
    return [
        timeseries("Temperature", "celsius", [Q(temperature, DEVICE)], line=Line(limits.gpu_temperature_celsius)),
        timeseries("GPUs throttled, by reason", "short", [Q(throttle, "{{reason}}")], stack=True,
                   description="Active clock-event reasons (gpu_idle left out): thermal and power caps slow decode."),
        timeseries("GPU up", "short", [Q(up, DEVICE)], max_value=1,
                   description="0: the GPU did not answer (fallen off the bus, driver error) or its sample is stale."),
        timeseries("XID errors in the last hour", "short", [Q(xid, DEVICE + " XID {{xid}}")], width=12),
        timeseries("ECC errors in the last hour", "short", [Q(ecc, DEVICE + " {{type}}")], width=12),
    ]


def build(config: Config, limits: Limits) -> dict:
    rows = [("Saturation: bandwidth vs compute", _saturation(limits)), ("Power and energy", _power()),
            ("Temperature, throttling and errors", _health(limits))]
    return dashboard(UID, "infersight / GPUs",
                     "Memory bandwidth next to SM activity, power, energy per token, temperature, throttle "
                     "reasons, XID and ECC errors.", layout(rows), [variable("node", "node", gpu.UP.name, "node")])

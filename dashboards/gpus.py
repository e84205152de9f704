"""GPUs: memory bandwidth (what "full" means in inference) next to SM and tensor activity, clocks, memory,
interconnect, power, energy per token, temperature, throttling and hardware errors.

What NVIDIA's dcgm-exporter dashboard shows is here too (clocks, tensor activity, framebuffer bytes,
fleet-wide temperature and power, per-``gpu`` selection), from the catalog's ``gpu_*`` signals that both
our NVML collector and the dcgm-exporter source produce.
"""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.collectors.gpu.promql import energy_per_token
from infersight.config import Config
from infersight.dashboards.panels import RATE, Line, Q, dashboard, layout, recorded, stat, timeseries, variable
from infersight.signals import gpu
from infersight.thresholds import Thresholds

UID = "infersight-gpus"
F = {"node": "=~$node", "gpu": "=~$gpu"}
DEVICE = "{{node}}/{{gpu}}"
BY_DEVICE = "node, gpu"


def per_device(signal, how: str = "max", **matchers: str) -> str:
    return f"{how} by ({BY_DEVICE}) ({signal.select(**F, **matchers)})"


def _fleet(limits: Thresholds) -> list[dict]:
    """Fleet-wide figures for the selected GPUs, as dcgm-exporter's dashboard leads with."""
    return [
        stat("GPUs up", "short", [Q(f"sum({gpu.UP.select(**F)})", "up")], width=4,
             description="GPUs that answered their last sample.", good="every GPU of the fleet; a drop is a GPU "
                                                                    "fallen off the bus or a stale collector."),
        stat("GPUs down", "short", [Q(f"count({gpu.UP.select(**F)} == 0) or vector(0)", "down")],
             line=Line(1), width=4, graph=False, description="GPUs whose last sample failed or is stale.",
             good="0."),
        stat("Hottest GPU", "celsius", [Q(f"max({gpu.TEMPERATURE.select(**F)})", "max")],
             line=Line(limits.gpu_temperature_celsius, warn=limits.gpu_temperature_celsius - 10), width=4,
             description="The highest die temperature; red at thresholds.gpu_temperature_celsius.",
             good="well under the line; near it the GPU throttles its clocks (see the clock-event panel)."),
        stat("Fleet power", "watt", [Q(f"sum({gpu.POWER.select(**F)})", "power")], width=4,
             description="Power drawn by the selected GPUs together.",
             good="tracks the token rate; high power with few tokens is waste (see energy per token)."),
        stat("Mean bandwidth utilization", "percentunit",
             [Q(f"avg({gpu.MEMORY_BANDWIDTH_UTILIZATION.select(**F)})", "mean")],
             line=Line(limits.bandwidth_saturation), width=4, decimals=1,
             description="DRAM bandwidth use averaged over the selected GPUs.",
             good="under thresholds.bandwidth_saturation; at it, decode cannot go faster on these GPUs."),
        stat("Framebuffer in use", "bytes", [Q(f"sum({gpu.MEMORY_USED.select(**F)})", "used")], width=4,
             description="Device memory in use over all selected GPUs (weights plus KV cache).",
             good="steady: engines preallocate their KV cache, so growth means a new or leaking process."),
    ]


def _saturation(limits: Thresholds) -> list[dict]:
    bandwidth = f"max by ({BY_DEVICE}, source) ({gpu.MEMORY_BANDWIDTH_UTILIZATION.select(**F)})"
    return [
        timeseries("Memory bandwidth utilization", "percentunit",
                   [Q(bandwidth, DEVICE + " ({{source}})"),
                    Q(recorded(rec.BANDWIDTH_AVG5M, F), DEVICE + " 5m mean")],
                   line=Line(limits.bandwidth_saturation), max_value=1, width=12,
                   description="source=gpm: NVML GPM DRAM_BW_UTIL (Hopper and newer); source=dcgm: "
                               "dcgm-exporter's DCGM_FI_PROF_DRAM_ACTIVE; source=nvml_busy: the memory-busy time "
                               "share of older GPUs, not a bandwidth.",
                   good="under the line; decode is bandwidth-bound, so this, not SM activity, says 'full'."),
        timeseries("SM activity", "percentunit",
                   [Q(per_device(gpu.SM_ACTIVITY), DEVICE),
                    Q(recorded(rec.SM_ACTIVITY_AVG5M, F), DEVICE + " 5m mean")],
                   line=Line(limits.compute_low, below=True), max_value=1, width=12,
                   description="GPM share of SMs busy (from dcgm-exporter: DCGM_FI_PROF_SM_ACTIVE, not in its "
                               "default counters). Bandwidth over its line with SM activity under this one: "
                               "decode is bandwidth-bound, more batching will not help.",
                   good="high during prefill-heavy load; low SM activity with high bandwidth is normal for decode."),
    ]


def _activity() -> list[dict]:
    return [
        timeseries("GPU utilization", "percentunit", [Q(per_device(gpu.UTILIZATION), DEVICE)], max_value=1,
                   description="NVML utilization.gpu: share of time any kernel ran (DCGM_FI_DEV_GPU_UTIL). Coarse: "
                               "one small kernel counts as busy.",
                   good="near 1 under load; 0 on a serving GPU means the engine is idle or hung."),
        timeseries("Tensor core activity", "percentunit", [Q(per_device(gpu.TENSOR_ACTIVITY), DEVICE)],
                   max_value=1, description="GPM any-tensor-pipe utilization (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).",
                   good="rises with prefill and batch size; flat near 0 under load means the math is not on "
                        "tensor cores (wrong dtype or kernel)."),
        timeseries("SM occupancy", "percentunit", [Q(per_device(gpu.SM_OCCUPANCY), DEVICE)], max_value=1,
                   description="GPM resident warps over the maximum.",
                   good="stable under steady load; a drop with the same traffic means smaller batches."),
        timeseries("SM clock", "hertz", [Q(per_device(gpu.SM_CLOCK), DEVICE)], width=12,
                   description="DCGM_FI_DEV_SM_CLOCK. Falls when a power or thermal cap acts.",
                   good="flat at the application clock under load; dips line up with throttle reasons below."),
        timeseries("Memory clock", "hertz", [Q(per_device(gpu.MEMORY_CLOCK), DEVICE)], width=12,
                   description="DCGM_FI_DEV_MEM_CLOCK; HBM bandwidth scales with it.",
                   good="constant; a lower memory clock caps decode throughput."),
    ]


def _memory_and_links() -> list[dict]:
    used = per_device(gpu.MEMORY_USED, "sum")
    total = per_device(gpu.MEMORY_TOTAL, "sum")
    pcie = f"sum by ({BY_DEVICE}, direction) ({gpu.PCIE_THROUGHPUT.select(**F)})"
    nvlink = f"sum by ({BY_DEVICE}, direction) ({gpu.NVLINK_THROUGHPUT.select(**F)})"
    return [
        timeseries("Framebuffer used and total", "bytes", [Q(used, "used " + DEVICE), Q(total, "total " + DEVICE)],
                   description="DCGM_FI_DEV_FB_USED against the device's memory.",
                   good="used close to total and flat: the engine reserved its KV cache at start."),
        timeseries("Memory used share", "percentunit", [Q(f"{used} / {total}", DEVICE)], max_value=1,
                   description="Used over total device memory.",
                   good="steady; creeping up under constant load is a leak outside the engine's pool."),
        timeseries("PCIe and NVLink traffic", "Bps",
                   [Q(pcie, "PCIe " + DEVICE + " {{direction}}"), Q(nvlink, "NVLink " + DEVICE + " {{direction}}")],
                   description="GPM PCIe and NVLink throughput, by direction (rx, tx).",
                   good="NVLink busy only with tensor parallelism; steady PCIe rx under load is host offload "
                        "(CPU KV swap), worth a look."),
    ]


def _power() -> list[dict]:
    power = per_device(gpu.POWER, "sum")
    limit = per_device(gpu.POWER_LIMIT, "sum")
    per_node = energy_per_token(RATE, by=("node",), node="=~$node")
    fleet = energy_per_token(RATE, by=())
    return [
        timeseries("Power draw and limit", "watt", [Q(power, DEVICE), Q(limit, "limit " + DEVICE)], width=12,
                   description="Draw against the enforced power limit.",
                   good="under the limit; draw pinned at it means sw_power_cap throttling."),
        timeseries("Energy per generated token", "suffix: J/token", [Q(per_node, "{{node}}"), Q(fleet, "fleet")],
                   width=12, description="GPU energy rate over the engines' generated-token rate, joined on node.",
                   good="low and flat; rising with the same traffic means idle GPUs or smaller batches."),
    ]


def _health(limits: Thresholds) -> list[dict]:
    temperature = per_device(gpu.TEMPERATURE)
    throttle = f"sum by (reason) ({gpu.CLOCK_EVENT.select(reason='!=gpu_idle', **F)})"
    xid = f"sum by ({BY_DEVICE}, xid) (increase({gpu.XID_ERRORS.select(**F)}[1h]))"
    ecc = f"sum by ({BY_DEVICE}, type) (increase({gpu.ECC_ERRORS.select(**F)}[1h]))"
    up = f"min by ({BY_DEVICE}) ({gpu.UP.select(**F)})"
    return [
        timeseries("Temperature", "celsius", [Q(temperature, DEVICE)], line=Line(limits.gpu_temperature_celsius),
                   description="Die temperature; the line is thresholds.gpu_temperature_celsius.",
                   good="under the line with margin; the hottest GPUs of a node share its airflow."),
        timeseries("GPUs throttled, by reason", "short", [Q(throttle, "{{reason}}")], stack=True,
                   description="Active clock-event reasons (gpu_idle left out): thermal and power caps slow decode.",
                   good="empty; sw_power_cap or hw_thermal under load costs tokens per second."),
        timeseries("GPU up", "short", [Q(up, DEVICE)], max_value=1,
                   description="0: the GPU did not answer (fallen off the bus, driver error) or its sample is stale.",
                   good="1 for every GPU."),
        timeseries("XID errors in the last hour", "short", [Q(xid, DEVICE + " XID {{xid}}")], width=12,
                   description="XID events by code (79: fallen off the bus, 48/94/95: uncorrectable ECC).",
                   good="0 for every code; the paging codes also page through the alerts."),
        timeseries("ECC errors in the last hour", "short", [Q(ecc, DEVICE + " {{type}}")], width=12,
                   description="Corrected and uncorrected ECC errors.",
                   good="no uncorrected errors; a steady corrected count on one GPU is a retirement candidate."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("Fleet now", _fleet(limits)), ("Saturation: bandwidth vs compute", _saturation(limits)),
            ("Activity and clocks", _activity()), ("Memory and interconnect", _memory_and_links()),
            ("Power and energy", _power()), ("Temperature, throttling and errors", _health(limits))]
    variables = [variable("node", "node", gpu.UP.name, "node"), variable("gpu", "gpu", gpu.UP.name, "gpu")]
    return dashboard(UID, "infersight / GPUs",
                     "Memory bandwidth next to SM and tensor activity, clocks, framebuffer, PCIe/NVLink, power, "
                     "energy per token, temperature, throttle reasons, XID and ECC.", layout(rows), variables)

"""GPU signals, produced by ``collectors/gpu`` (NVML + GPM, or the simulated backend).

The GPU's product name is the ``gpu_model`` label, not ``model``: ``model`` is the LLM model
everywhere else, and the two must not collide when GPU series are joined with engine series.
Join GPU and engine series on ``node`` and ``gpu`` (``collectors/gpu/promql.py`` builds the
energy-per-token join).

The ``infersight_gpu_collector_*`` signals are the exporter's own health.
"""

from infersight.signals.catalog import Kind, declare

PRODUCER = "collectors.gpu"
DEVICE_LABELS = ("node", "gpu", "uuid", "gpu_model")
# Kubernetes attribution of a GPU to the pod using it (dcgm-exporter's pod mapper): only on gpu_pod_info.
POD_LABELS = ("namespace", "pod", "container")
# XIDs after which the GPU must be drained and reset: 48 double-bit ECC error, 79 fallen off the bus,
# 95 uncontained ECC error. Producers create their series at 0 where they can, so that a first event
# shows as an increase; the GPU alerts page on these and ticket the others.
PAGING_XIDS = ("48", "79", "95")

UP = declare("gpu_up", Kind.GAUGE, "", DEVICE_LABELS,
             "1 if the GPU answered the last sample, 0 if it failed or the sample is stale (its device readings "
             "are then absent; the XID counts the collector saw stay).", PRODUCER)
INFO = declare("gpu_info", Kind.GAUGE, "", (*DEVICE_LABELS, "driver_version"),
               "Always 1; carries the driver version.", PRODUCER)
UTILIZATION = declare("gpu_utilization_ratio", Kind.GAUGE, "ratio", DEVICE_LABELS,
                      "Share of time one or more kernels ran (NVML utilization.gpu), 0..1.", PRODUCER)
MEMORY_BUSY = declare("gpu_memory_busy_ratio", Kind.GAUGE, "ratio", DEVICE_LABELS,
                      "Share of time device memory was read or written (NVML utilization.memory), 0..1. "
                      "A time share, not bandwidth.", PRODUCER)
MEMORY_BANDWIDTH_UTILIZATION = declare(
    "gpu_memory_bandwidth_utilization_ratio", Kind.GAUGE, "ratio", (*DEVICE_LABELS, "source"),
    "DRAM bandwidth utilization 0..1: GPM DRAM_BW_UTIL where supported (source=\"gpm\"), "
    "else the memory-busy time share (source=\"nvml_busy\"); from dcgm-exporter, "
    "DCGM_FI_PROF_DRAM_ACTIVE (source=\"dcgm\").", PRODUCER)
MEMORY_USED = declare("gpu_memory_used_bytes", Kind.GAUGE, "bytes", DEVICE_LABELS,
                      "Device memory in use.", PRODUCER)
MEMORY_TOTAL = declare("gpu_memory_total_bytes", Kind.GAUGE, "bytes", DEVICE_LABELS,
                       "Device memory in total.", PRODUCER)
POWER = declare("gpu_power_watts", Kind.GAUGE, "watts", DEVICE_LABELS, "Power draw.", PRODUCER)
POWER_LIMIT = declare("gpu_power_limit_watts", Kind.GAUGE, "watts", DEVICE_LABELS,
                      "Enforced power limit.", PRODUCER)
ENERGY = declare("gpu_energy_joules_total", Kind.COUNTER, "joules", DEVICE_LABELS,
                 "Energy consumed since the driver loaded.", PRODUCER)
TEMPERATURE = declare("gpu_temperature_celsius", Kind.GAUGE, "celsius", DEVICE_LABELS,
                      "GPU die temperature.", PRODUCER)
SM_CLOCK = declare("gpu_sm_clock_hertz", Kind.GAUGE, "hertz", DEVICE_LABELS, "SM clock.", PRODUCER)
MEMORY_CLOCK = declare("gpu_memory_clock_hertz", Kind.GAUGE, "hertz", DEVICE_LABELS, "Memory clock.", PRODUCER)
CLOCK_EVENT = declare(
    "gpu_clock_event_active", Kind.GAUGE, "", (*DEVICE_LABELS, "reason"),
    "1 while the clock-event (throttle) reason is active: gpu_idle, applications_clocks, sw_power_cap, "
    "hw_slowdown, sync_boost, sw_thermal, hw_thermal, hw_power_brake, display_clocks.", PRODUCER)
ECC_ERRORS = declare("gpu_ecc_errors_total", Kind.COUNTER, "", (*DEVICE_LABELS, "type"),
                     "ECC errors since the driver loaded, by type (corrected, uncorrected).", PRODUCER)
# XIDs the collector exposes at 0 for every GPU before their first event (DESIGN 8), so the first
# one is an increase: the paging ones plus the common job-level ones (13 graphics engine
# exception, 31 MMU fault, 43 GPU stopped processing, 63/64 row remapping, 74 NVLink, 94
# contained ECC error). Any other code appears at its first event; the rules catch that too.
KNOWN_XIDS = ("13", "31", "43", "48", "63", "64", "74", "79", "94", "95")
XID_ERRORS = declare("gpu_xid_errors_total", Kind.COUNTER, "", (*DEVICE_LABELS, "xid"),
                     "XID errors seen by the collector, by XID code (79: fallen off the bus). From dcgm-exporter, "
                     "which keeps only the last XID: 1 for the last code, 0 for the known codes it is not, so "
                     "increase() counts changes of the last XID, a lower bound on events.", PRODUCER)
SM_ACTIVITY = declare("gpu_sm_activity_ratio", Kind.GAUGE, "ratio", DEVICE_LABELS,
                      "GPM SM utilization 0..1 (share of SMs busy, time-averaged).", PRODUCER)
SM_OCCUPANCY = declare("gpu_sm_occupancy_ratio", Kind.GAUGE, "ratio", DEVICE_LABELS,
                       "GPM SM occupancy 0..1 (resident warps over the maximum).", PRODUCER)
TENSOR_ACTIVITY = declare("gpu_tensor_activity_ratio", Kind.GAUGE, "ratio", DEVICE_LABELS,
                          "GPM any-tensor-pipe utilization 0..1.", PRODUCER)
PCIE_THROUGHPUT = declare("gpu_pcie_throughput_bytes_per_second", Kind.GAUGE, "bytes",
                          (*DEVICE_LABELS, "direction"), "PCIe traffic (direction rx or tx), GPM.", PRODUCER)
NVLINK_THROUGHPUT = declare("gpu_nvlink_throughput_bytes_per_second", Kind.GAUGE, "bytes",
                            (*DEVICE_LABELS, "direction"), "NVLink traffic (direction rx or tx), GPM.", PRODUCER)

POD_INFO = declare("gpu_pod_info", Kind.GAUGE, "", (*DEVICE_LABELS, *POD_LABELS),
                   "1 for each pod using the GPU (dcgm-exporter's Kubernetes pod mapping). Attribute any GPU "
                   "series with * on (node, gpu) group_left (namespace, pod, container) gpu_pod_info.", PRODUCER)

# -- the exporter's own health ---------------------------------------------------------------
COLLECTOR_LABELS = ("node",)
COLLECTOR_DEVICES = declare("infersight_gpu_collector_devices", Kind.GAUGE, "", (*COLLECTOR_LABELS, "backend"),
                            "GPUs the collector found at start (backend nvml or sim), or in the last scrape of a "
                            "dcgm-exporter (backend dcgm, one series per source node).", PRODUCER)
COLLECTOR_SAMPLES = declare("infersight_gpu_collector_samples_total", Kind.COUNTER, "", COLLECTOR_LABELS,
                            "Background sampling passes over all GPUs.", PRODUCER)
COLLECTOR_SAMPLE_DURATION = declare(
    "infersight_gpu_collector_sample_duration_seconds", Kind.GAUGE, "seconds", COLLECTOR_LABELS,
    "Duration of the last background sampling pass over all GPUs.", PRODUCER)
COLLECTOR_SAMPLE_AGE = declare(
    "infersight_gpu_collector_sample_age_seconds", Kind.GAUGE, "seconds", COLLECTOR_LABELS,
    "Seconds since the last sampling pass finished; past the stale limit every gpu_up reads 0.", PRODUCER)
COLLECTOR_SCRAPE_DURATION = declare(
    "infersight_gpu_collector_scrape_duration_seconds", Kind.GAUGE, "seconds", COLLECTOR_LABELS,
    "Time the previous scrape spent building its series from the last sample (it never waits for sampling).",
    PRODUCER)
COLLECTOR_ERRORS = declare(
    "infersight_gpu_collector_errors_total", Kind.COUNTER, "", (*COLLECTOR_LABELS, "gpu", "call"),
    "Failed device calls, by GPU index and call (NVML function name, or the sim's); gpu=\"\" for "
    "calls not tied to one GPU.", PRODUCER)
COLLECTOR_OTLP_EXPORTS = declare(
    "infersight_gpu_collector_otlp_exports_total", Kind.COUNTER, "", (*COLLECTOR_LABELS, "result"),
    "OTLP metric pushes, by result (success or failure).", PRODUCER)

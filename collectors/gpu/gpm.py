"""NVML GPM (GPU Performance Monitoring, Hopper and newer): metrics over two samples.

GPM reports rates between two samples taken some time apart. Each call to :meth:`take` takes a
new sample and, once a previous one exists, returns the metrics over the window between them, so
the sampler's interval is the GPM window. Percentages become ratios 0..1 and MiB/s become
bytes/s, to match the catalog's base units.
"""

from __future__ import annotations

from typing import Any

MIB = 1024 * 1024

# DeviceReading attribute (and key for the rx/tx pairs) -> (pynvml metric constant, scale).
GPM_METRICS: dict[tuple[str, str | None], tuple[str, float]] = {
    ("bandwidth_utilization", None): ("NVML_GPM_METRIC_DRAM_BW_UTIL", 0.01),
    ("sm_activity", None): ("NVML_GPM_METRIC_SM_UTIL", 0.01),
    ("sm_occupancy", None): ("NVML_GPM_METRIC_SM_OCCUPANCY", 0.01),
    ("tensor_activity", None): ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 0.01),
    ("pcie_bytes_per_second", "rx"): ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", MIB),
    ("pcie_bytes_per_second", "tx"): ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", MIB),
    ("nvlink_bytes_per_second", "rx"): ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", MIB),
    ("nvlink_bytes_per_second", "tx"): ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", MIB),
}


def gpm_supported(nvml: Any, handle: Any) -> bool:
    """``nvmlGpmQueryDeviceSupport``; an old driver or pynvml without GPM means no."""
    if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
        return False
    try:
        return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except nvml.NVMLError:
        return False


class GPMWindow:
    """Two GPM sample buffers for one device, used alternately."""

    def __init__(self, nvml: Any, handle: Any):
        self.nvml = nvml
        self.handle = handle
        self._previous = nvml.nvmlGpmSampleAlloc()
        self._current = nvml.nvmlGpmSampleAlloc()
        self._have_previous = False
        self._metric_ids = [getattr(nvml, constant) for constant, _scale in GPM_METRICS.values()]

    def reset(self) -> None:
        """Forget the previous sample (after a device error the window would span the outage)."""
        self._have_previous = False

    def take(self) -> dict[tuple[str, str | None], float] | None:
        """Sample now; the metrics since the previous sample, or None on the first call.

        Raises NVMLError when the device does not answer; the caller decides what that means.
        """
        self.nvml.nvmlGpmSampleGet(self.handle, self._current)
        values = self._metrics() if self._have_previous else None
        self._previous, self._current = self._current, self._previous
        self._have_previous = True
        return values

    def _metrics(self) -> dict[tuple[str, str | None], float]:
        nvml = self.nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._metric_ids)
        request.sample1 = self._previous
        request.sample2 = self._current
        for slot, metric_id in enumerate(self._metric_ids):
            request.metrics[slot].metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        values = {}
        for slot, (key, (_constant, scale)) in enumerate(GPM_METRICS.items()):
            metric = request.metrics[slot]
            # Each metric carries its own return code: one unsupported metric leaves only itself out.
            if metric.nvmlReturn == nvml.NVML_SUCCESS:
                values[key] = metric.value * scale
        return values

    def close(self) -> None:
        for sample in (self._previous, self._current):
            try:
                self.nvml.nvmlGpmSampleFree(sample)
            except self.nvml.NVMLError:
                pass

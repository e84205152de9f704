"""GPU collector: NVML + GPM backends, a simulated backend, and the exporter."""

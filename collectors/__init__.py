"""NVML/GPM GPU collectors and engine collectors, served to Prometheus."""

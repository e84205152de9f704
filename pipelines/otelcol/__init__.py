"""OpenTelemetry Collector (contrib) configurations for sites that outgrow one receiver."""

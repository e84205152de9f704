"""Request tracing for gateways and engines, token timelines, tail sampling, the instrumenting proxy."""

"""A simulated inference fleet (DESIGN 8): engines, GPUs, a gateway, clients and incidents.

It runs on two clocks. In virtual time (``infersight simulate``, the alert-quality test) hours pass
in seconds and the series our producers would expose are written at every scrape step. In real
time (``infersight demo``) the same fleet serves vLLM-format /metrics to the real engine collector,
drives the GPU collector's simulated devices and sends requests through the real request tracer.
"""

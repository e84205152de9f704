"""Grafana dashboards generated from code, in Grafana's current JSON model.

One module per dashboard (``fleet``, ``engines``, ``gpus``, ``pipeline``, ``traces``), each with
``build(config, limits) -> Dashboard``. PromQL comes from the signal catalog and the alerts'
recording rules; SQL from ``pipelines/queries/library.py``; thresholds from the config (through
``alerts/limits.py``). ``build.py`` writes the JSON and Grafana's provisioning files.
"""

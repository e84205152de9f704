"""Grafana dashboards generated from code, in Grafana's current JSON model.

One module per dashboard (``fleet``, ``engines``, ``gpus``, ``pipeline``, ``traces``, ``instance``,
``capacity``, ``breaker``, ``canary``), each with ``build(config, limits) -> dict`` (the dashboard
JSON). PromQL comes from the signal catalog and the alerts' recording rules; SQL from
``pipelines/queries/library.py``; thresholds from the core model
(``infersight/thresholds.py``, built from the config).
``panels.py`` builds every panel; ``build.py`` writes the JSON and Grafana's provisioning files;
``schema_check.py`` checks them against Grafana's published schema.
"""

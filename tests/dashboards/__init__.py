"""Tests of the Grafana dashboards: structure, every PromQL and SQL query against real engines."""

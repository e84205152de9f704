"""Grafana dashboards generated from code (grafanalib)."""

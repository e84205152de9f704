"""Prometheus rules and Alertmanager routing generated from code, with runbooks and tests."""

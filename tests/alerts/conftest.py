"""Alert outputs built once per session: the default config and a different one with secrets configured."""

from __future__ import annotations

import pytest

from infersight.alerts.build import build
from infersight.config import parse_config

PAGERDUTY_KEY = "pd-routing-key-that-must-not-leak"
SLACK_URL = "https://hooks.slack.example/that-must-not-leak"


def custom_config_data(secret_dir) -> dict:
    """Every threshold moved off its default, so no test passes by matching defaults by accident."""
    (secret_dir / "pagerduty.key").write_text(PAGERDUTY_KEY)
    (secret_dir / "slack.url").write_text(SLACK_URL)
    return {
        "cluster": "prod-eu",
        "slo": {"ttft_seconds": 0.5, "ttft_objective": 0.995, "ttft_p95_seconds": 0.8},
        "thresholds": {
            "gateway_queue_depth": 20, "ttft_slo_share_rising": 0.75, "forecast_hours": 1,
            "forecast_min_demand_share": 0.95, "queue_wait_slo_share": 0.15, "prefill_capacity_share": 0.75,
            "instance_p99_ttft_seconds": 2.5, "instance_p99_peer_factor": 3, "retry_ratio": 0.1,
            "ejection_share": 0.25, "flaps_per_15m": 3,
            "rejection_ratio": 0.02, "bandwidth_saturation": 0.85, "compute_low": 0.4, "kv_usage_near_full": 0.9,
            "prefix_hit_collapse": 0.6, "gpu_temperature_celsius": 80, "cold_start_minutes": 10,
            "cold_cache_hit_ratio": 0.2, "spans_rejected_ratio": 0.05, "exporter_jobs": "infersight-.*",
        },
        "capacity": {"gpu": "H200", "target_tokens_per_s": 30},
        "alertmanager": {
            "pagerduty_routing_key_file": str(secret_dir / "pagerduty.key"),
            "slack_api_url_file": str(secret_dir / "slack.url"),
            "slack_channel": "#infer-prod",
            "runbook_base_url": "https://runbooks.example/alerts/",
        },
    }


@pytest.fixture(scope="session")
def default_build(tmp_path_factory):
    return build(parse_config({}), tmp_path_factory.mktemp("alerts-default"))


@pytest.fixture(scope="session")
def custom_build(tmp_path_factory):
    config = parse_config(custom_config_data(tmp_path_factory.mktemp("secrets")))
    return build(config, tmp_path_factory.mktemp("alerts-custom"))

"""The verdict on promtool's probe: per model, so a model the incident leaves alone must stay quiet."""

from __future__ import annotations

from infersight.simulator import quality
from tests.simulator.runs import SCENARIOS

GOT = ", ".join([
    '{alertname="LLMRetryStorm", model="gemma-27b-int4", severity="critical"} 2.9E+01',
    '{alertname="LLMEjectionCascade", model="gemma-27b-int4", severity="critical"} 2.4E+01',
    '{alertname="LLMTTFTNearSLORising", model="gemma-27b-int4", severity="warning"} 2.8E+01',
    '{alertname="LLMTTFTNearSLORising", model="llama-3-8b", severity="warning"} 3.3E+01',
    '{alertname="GPUDown", severity="critical"} 2.1E+01',
])
PROBE_OUTPUT = f"""
  alert quality probe
    expr: "min by (alertname, severity, model) (...)", time: 40m,
        exp: nil
        got: {GOT}
"""


def test_the_probe_is_read_per_model():
    fired = quality.parse_probe(PROBE_OUTPUT)
    assert fired[("LLMTTFTNearSLORising", "warning", "llama-3-8b", "")] == 33.0
    assert fired[("GPUDown", "critical", "", "")] == 21.0
    assert quality.by_alert(fired)[("LLMTTFTNearSLORising", "warning")] == 28.0


def test_an_alert_for_a_quiet_model_fails_even_where_it_may_fire_for_the_incidents():
    scenario = SCENARIOS["retry-storm-multi-model"]
    assert "llama-3-8b" in scenario.quiet_models
    fired = quality.parse_probe(PROBE_OUTPUT)
    fired.pop(("GPUDown", "critical", "", ""))
    result = quality.judge(scenario, fired)
    bad = [r for r in result.rows if not r.ok and not r.known_failure]
    assert [(r.alert, r.model) for r in bad] == [("LLMTTFTNearSLORising", "llama-3-8b")]
    quiet = {k: v for k, v in fired.items() if k[2] != "llama-3-8b"}
    assert quality.judge(scenario, quiet).ok


def test_an_alert_for_a_quiet_pool_fails_even_where_it_may_fire_for_another_pool():
    """The canary's hot instances are half-opened; the same alert on a stable instance is a false alarm."""
    scenario = SCENARIOS["canary-hot-spot"]
    assert scenario.quiet_pools == ["stable"]
    got = ('{alertname="LLMInstanceTTFTP99High", model="gemma-27b-int4", pool="canary", severity="warning"} '
           '1.3E+01, {alertname="LLMInstanceTTFTP99High", model="gemma-27b-int4", pool="stable", '
           'severity="warning"} 3.1E+01')
    fired = quality.parse_probe(PROBE_OUTPUT.replace(GOT, got))
    assert fired[("LLMInstanceTTFTP99High", "warning", "gemma-27b-int4", "stable")] == 31.0
    bad = [r for r in quality.judge(scenario, fired).rows if not r.ok and not r.known_failure]
    assert [(r.alert, r.pool) for r in bad] == [("LLMInstanceTTFTP99High", "stable")]
    canary_only = {k: v for k, v in fired.items() if k[3] != "stable"}
    assert quality.judge(scenario, canary_only).ok

"""Rule generation without external tools: catalog closure, naming, runbooks, thresholds, bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from infersight.alerts import recording as rec
from infersight.alerts import templates
from infersight.alerts.build import render_all
from infersight.alerts.model import Alert, Case, Expected, Severity, SignalClass
from infersight.alerts.promql import num
from infersight.alerts.promtests import test_file as make_test_file
from infersight.alerts.recording import recording_rules
from infersight.alerts.rules import alerts_by_file, all_alerts
from infersight.alerts.series import histogram, le, observations_near, quantile
from infersight.capacity import plan
from infersight.config import ConfigError, parse_config
from infersight.signals import CATALOG, request
from infersight.thresholds import ThresholdsError, thresholds_from_config
from tests.promql_names import metric_names

RUNBOOKS = Path(__file__).resolve().parents[2] / "alerts" / "runbooks"
RECORD_NAME = re.compile(r"^[a-z_]*:[a-z0-9_]+:[a-z0-9_]+$")


@pytest.fixture(scope="module")
def limits():
    return thresholds_from_config(parse_config({}))


def test_every_series_a_rule_reads_is_produced(limits):
    """The loop is closed: each name in a rule is a catalog series or a recording rule defined here."""
    recorded = {r.record for r in recording_rules(limits)}
    produced = {series for signal in CATALOG.values() for series in signal.series_names()}
    exprs = [r.expr for r in recording_rules(limits)] + [a.expr for a in all_alerts(limits)]
    used = set().union(*map(metric_names, exprs))
    assert used, "the name scan found nothing; it is broken"
    assert used - recorded - produced == set()
    # and every recording rule is used by some alert (directly or through recordings it reads), or
    # is one of the dashboard quantiles
    reads = {r.record: metric_names(r.expr) for r in recording_rules(limits)}
    needed = set().union(*(metric_names(a.expr) for a in all_alerts(limits)))
    while more := set().union(*(reads.get(name, set()) for name in needed)) - needed:
        needed |= more
    unused = recorded - needed
    assert all(":p" in name or name.endswith((":sum", ":avg30m", ":avg5m")) or "slo_errors" in name
               for name in unused), unused


def test_recording_rule_names_follow_level_metric_operations(limits):
    names = [r.record for r in recording_rules(limits)]
    assert len(names) == len(set(names))
    for name in names:
        assert RECORD_NAME.match(name), name
    assert "model_instance_pool:llm_time_to_first_token_seconds:p99_rate5m" in names
    assert "model_instance_pool:llm_time_per_output_token_seconds:p50_rate5m" in names


def test_slo_errors_count_the_bucket_at_the_slo_bound():
    custom = thresholds_from_config(parse_config({"slo": {"ttft_seconds": 0.5}}))
    slo_rules = [r for r in recording_rules(custom) if "slo_errors" in r.record]
    assert len(slo_rules) == 7
    assert all(f'le="{le(0.5)}"' in r.expr for r in slo_rules)


def test_alerts_carry_mixin_labels_and_annotations(limits):
    alerts = all_alerts(limits)
    assert {a.signal for a in alerts} == set(SignalClass)
    keys = [(a.name, a.severity) for a in alerts]
    assert len(keys) == len(set(keys))
    for alert in alerts:
        assert alert.severity in Severity and alert.signal in SignalClass
        assert "{{" not in alert.summary, f"{alert.name}: the summary stays near-static"
        assert "{{" in alert.description, f"{alert.name}: the description carries the numbers"
        templates.render(alert.description, {}, 1.0)  # only the supported template forms


def test_every_alert_has_a_runbook(limits):
    files = render_all(parse_config({}))
    file_of = {alert.name: name for name, group in alerts_by_file(limits).items() for alert in group}
    for alert in all_alerts(limits):
        runbook = RUNBOOKS / f"{alert.name}.md"
        assert runbook.is_file(), f"write {runbook.name}"
        text = runbook.read_text()
        for section in ("## What it means", "## How to confirm", "## What to do"):
            assert section in text, f"{runbook.name}: missing {section}"
        url = f"{limits.runbook_base_url}/{alert.name}.md"
        assert url in files[f"rules/{file_of[alert.name]}.yml"]
    assert {p.stem for p in RUNBOOKS.glob("*.md")} == {a.name for a in all_alerts(limits)}, "stale runbooks"


def test_thresholds_follow_config_and_capacity_model():
    config = parse_config({"capacity": {"gpu": "H200", "target_tokens_per_s": 30, "prefill_utilization": 0.5},
                           "thresholds": {"queue_wait_slo_share": 0.2, "prefill_capacity_share": 0.8,
                                          "prefill_only_capacity_share": 0.9},
                           "cluster": "eu"})
    cap = config.capacity
    figures = plan(cap.model, cap.gpu_spec(), context_tokens=cap.context_tokens, prefill_utilization=0.5,
                   target_tokens_per_s=30)
    per_instance = figures.max_concurrent_requests_at_target
    limits = thresholds_from_config(config)
    alerts = {a.name: a for a in all_alerts(limits)}
    records = {r.record: r.expr for r in recording_rules(limits)}
    assert alerts["LLMInstanceOverloaded"].expr.endswith(f"> {2 * per_instance}")
    assert records[rec.IN_FLIGHT_CAPACITY_RATIO].endswith(f"* {per_instance})")
    # the prefill the forecast counts as capacity: 80% of the capacity model's prefill at 50% MFU
    capacity = records[rec.PREFILL_CAPACITY]  # an instance that decodes too, and a prefill-only one
    assert f"* {num(0.8 * figures.prefill_tokens_per_s)}\n" in capacity, capacity
    assert capacity.endswith(f"* {num(0.9 * figures.prefill_tokens_per_s)}\n)"), capacity
    assert rec.DEMAND_CAPACITY_RATIO in alerts["LLMDemandForecastOverCapacity"].expr
    # the queue bar is in seconds: 20% of the 1 s p95 target
    assert alerts["LLMGatewayQueueHigh"].expr.startswith(f"{rec.QUEUE_WAIT_30M} > 0.2\n")
    assert alerts["LLMRetryStorm"].static_labels("eu")["cluster"] == "eu"
    page = next(a for a in all_alerts(thresholds_from_config(config)) if a.severity is Severity.CRITICAL
                and a.name == "LLMTTFTErrorBudgetBurn")
    assert "> 0.144" in page.expr and "> 0.06" in page.expr and page.expr.endswith("/ 0.01")


def test_half_open_label_on_the_instance_breaker(limits):
    alert = next(a for a in all_alerts(limits) if a.name == "LLMInstanceTTFTP99High")
    assert alert.static_labels("x")["action"] == "half_open"


@pytest.mark.parametrize("data, words", [
    ({"slo": {"ttft_objective": 0.9}}, ["slo.ttft_objective 0.9", "could never fire", "0.99"]),
    ({"thresholds": {"instance_p99_ttft_seconds": 640}}, ["instance_p99_ttft_seconds 640", "largest finite bucket"]),
    ({"thresholds": {"instance_p99_ttft_seconds": 3}},
     ["instance_p99_ttft_seconds is 3", "not a bucket bound", "2.5, 5"]),
    # a request-TTFT bound but not one of vLLM's, which the breaker's engine-side p99 is read from
    ({"thresholds": {"instance_p99_ttft_seconds": 2}},
     ["instance_p99_ttft_seconds is 2,", "llm_engine_time_to_first_token_seconds", "1, 2.5, 5"]),
    ({"thresholds": {"ttft_slo_share_rising": 0.65}}, ["ttft_slo_share_rising is 0.65", "not a bucket bound"]),
    ({"slo": {"ttft_p95_seconds": 640}}, ["slo.ttft_p95_seconds 640", "largest finite bucket"]),
    ({"thresholds": {"cold_start_minutes": 2}}, ["cold_start_minutes 2", "5 or more"]),
    ({"capacity": {"target_tokens_per_s": 400}}, ["serves no request", "capacity.target_tokens_per_s"]),
])
def test_settings_that_break_alerts_are_refused(data, words, tmp_path):
    with pytest.raises(ThresholdsError) as err:
        render_all(parse_config(data))
    for word in words:
        assert word in str(err.value)


def test_ttft_slo_must_be_a_bucket_bound():
    with pytest.raises(ConfigError) as err:
        parse_config({"slo": {"ttft_seconds": 0.9}})
    message = str(err.value)
    assert "slo.ttft_seconds" in message and "bucket boundary" in message and "0.8, 1, 1.5" in message
    assert parse_config({"slo": {"ttft_seconds": 2.5}}).slo.ttft_seconds == 2.5


def test_an_alert_without_a_silent_case_is_refused(limits):
    alert = Alert("X", "vector(1)", Severity.INFO, SignalClass.GPU, "s", "d {{ $value | printf \"%.1f\" }}",
                  cases=[Case("fires", [], 1, [Expected({})])])
    with pytest.raises(ValueError, match="firing and a silent case.*X"):
        make_test_file(limits, [alert], [])


def test_template_rendering_matches_prometheus_forms():
    text = 'p99 of {{ $labels.instance }} is {{ $value | printf "%.2f" }}s; {{ $value | humanizePercentage }}'
    assert templates.render(text, {"instance": "i1"}, 0.4567) == "p99 of i1 is 0.46s; 45.67%"
    assert templates.render("{{ $labels.missing }}-", {}, 0) == "-"
    assert templates.render("{{ $value | humanizePercentage }}", {}, 0.3) == "30%"
    with pytest.raises(templates.TemplateError, match="unsupported"):
        templates.render("{{ $value | humanize }}", {}, 1.0)
    with pytest.raises(templates.TemplateError, match="rounding edge"):
        templates.check_clear_of_rounding('{{ $value | printf "%.2f" }}', 0.125)
    templates.check_clear_of_rounding('{{ $value | printf "%.2f" }}', 0.1249)


def test_histogram_quantile_model_by_hand():
    buckets = (0.5, 1.0, 2.5)
    # 70 at 0.5, 30 in (0.5, 1.0]: rank 95 sits 25 of 30 into the second bucket
    assert quantile(buckets, {0.5: 70, 1.0: 30}, 0.95) == pytest.approx(0.5 + 0.5 * 25 / 30)
    assert quantile(buckets, {0.25: 100}, 0.5) == pytest.approx(0.25)  # first bucket starts at 0
    assert quantile(buckets, {float("inf"): 100}, 0.99) == 2.5  # +Inf: highest finite bound
    obs = observations_near(request.TTFT.buckets, 0.99, 6.0)
    assert quantile(request.TTFT.buckets, obs, 0.99) == pytest.approx(6.0, rel=0.01)


def test_histogram_series_are_cumulative():
    series = {s.selector: s.values for s in histogram(request.TTFT, {"model": "m"}, [({0.5: 3, 2.5: 1}, 10)])}
    bucket = lambda bound: series[request.TTFT.bucket(model="m", le=bound)]  # noqa: E731
    assert bucket("0.25") == "0+0x9"
    assert bucket("0.5") == "0+3x9" and bucket("1.0") == "0+3x9" and bucket("2.5") == "0+4x9"
    assert bucket("+Inf") == "0+4x9"
    assert series[request.TTFT.count(model="m")] == "0+4x9"
    assert series[request.TTFT.sum(model="m")] == "0+4x9"  # 3 x 0.5 + 1 x 2.5 a minute


def test_every_recording_rule_has_an_exact_value_test(limits):
    from infersight.alerts.recording_tests import recording_test_file

    doc = recording_test_file(limits, "../rules/recording.yml")
    exprs = " ".join(t["expr"] for t in doc["tests"][0]["promql_expr_test"])
    missing = [r.record for r in recording_rules(limits) if not re.search(re.escape(r.record) + r"\b", exprs)]
    assert missing == []


@pytest.mark.parametrize("value, words", [("infer(", "not a valid regular expression"),
                                          ('a"b', "quotes and backslashes")])
def test_exporter_jobs_must_be_a_plain_regex(value, words):
    with pytest.raises(ConfigError, match="thresholds.exporter_jobs") as err:
        parse_config({"thresholds": {"exporter_jobs": value}})
    assert words in str(err.value)


def test_a_test_file_loads_the_recording_rules_its_alerts_read_and_no_others():
    from infersight.alerts.model import Recording
    from infersight.alerts.rulefiles import recordings_read_by

    chain = [Recording("a:x:rate5m", "rate(x[5m])"), Recording("b:y:rate5m", "rate(y[5m])"),
             Recording("a:x:ratio", "a:x:rate5m / 2"), Recording("c:z:max", "max(z)")]
    # read through another recording rule, in the group's order; an unread one is left out
    assert recordings_read_by(chain, ["a:x:ratio > 1"]) == [chain[0], chain[2]]
    assert recordings_read_by(chain, ['up{job="c:z:max_not"}']) == []
    files = render_all(parse_config({}))
    for name, text in files.items():
        if name.endswith("_test.yml") and name != "tests/recording_test.yml":
            loaded = yaml.safe_load(text)["rule_files"]
            assert loaded[-1] == f"../rules/{name.removeprefix('tests/').removesuffix('_test.yml')}.yml", loaded
            assert all(f"tests/{f}" in files for f in loaded[:-1]), loaded

"""The demo's compressed-clock rules: every duration divided by the speed, per-second rates read per
simulated second, nothing else changed, and the result still a valid rule set for the real promtool."""

from __future__ import annotations

import re

import pytest
import yaml

from infersight.alerts.build import render_all
from infersight.alerts.timescale import (
    TimescaleError,
    duration_ms,
    scale_alertmanager,
    scale_expr,
    scale_rule_file,
)
from infersight.config import Config
from tests.conftest import require_tool

SPEED = 60
DURATIONS = re.compile(r"\[(\w+)(?::(\w*))?\]|offset (\w+)")


def _unwrap(expr: str) -> str:
    """The scaled expression without the division of its rates by the speed."""
    for fn in ("rate", "deriv"):
        expr = expr.replace(f"({fn}(", f"{fn}(")
    return expr.replace(f" / {SPEED})", "")


def _shape(expr: str) -> str:
    """The expression with its durations, cold-start ages and forecast horizons blanked out."""
    expr = DURATIONS.sub("D", expr)
    expr = re.sub(r"(time\(\) - [^<]+< )[0-9.]+", r"\1AGE", expr)
    return re.sub(r"(predict_linear\(.*?D), [0-9.]+\)", r"\1, H)", expr)


def test_windows_offsets_horizons_and_ages_scale():
    assert scale_expr("rate(x[5m]) > 0", SPEED) == "(rate(x[5s]) / 60) > 0"
    assert scale_expr("max_over_time(y[30m:1m])", SPEED) == "max_over_time(y[30s:1s])"
    assert scale_expr("x offset 10m", SPEED) == "x offset 10s"
    assert scale_expr("avg_over_time(r[3d])", SPEED) == "avg_over_time(r[72m])"
    assert scale_expr("predict_linear(s[1h], 7200) > on (model) (c * 134)", SPEED) == \
        "predict_linear(s[1m], 120) > on (model) (c * 134)"
    assert scale_expr('(time() - llm_instance_start_time_seconds{a="b"} < 900)', SPEED) == \
        '(time() - llm_instance_start_time_seconds{a="b"} < 15)'
    assert scale_expr("rate(x[30s])", SPEED) == "(rate(x[500ms]) / 60)"


def test_per_second_rates_read_per_simulated_second():
    # prompt tokens to prefill against the capacity model's tokens/s: per real second the fleet reads 60x
    assert scale_expr("sum by (model) (rate(t[15m])) > on (model) (c * 7700)", SPEED) == \
        "sum by (model) ((rate(t[15s]) / 60)) > on (model) (c * 7700)"
    assert scale_expr("deriv(q[10m]) > 0", SPEED) == "(deriv(q[10s]) / 60) > 0"
    assert scale_expr("max_over_time(rate(x[1m])[5m:])", SPEED) == "max_over_time((rate(x[1s]) / 60)[5s:])"
    assert scale_expr("deriv(rate(x[1m])[10m:1m])", SPEED) == "(deriv((rate(x[1s]) / 60)[10s:1s]) / 60)"
    assert scale_expr("increase(x[5m]) > 3 and my_rate > 1", SPEED) == "increase(x[5s]) > 3 and my_rate > 1"


@pytest.mark.parametrize("expr", ["irate(x[5m]) > 3", "hour() > 3", "timestamp(x) > 0", "time() - x > 5",
                                  "x @ 1700000000"])
def test_clock_readings_it_cannot_scale_are_refused(expr):
    with pytest.raises(TimescaleError):
        scale_expr(expr, SPEED)


def test_every_generated_rule_scales_and_only_its_durations_change():
    files = render_all(Config())
    for path, text in files.items():
        if not path.startswith("rules/"):
            continue
        original = yaml.safe_load(text)
        scaled = scale_rule_file(original, SPEED)
        for g0, g1 in zip(original["groups"], scaled["groups"], strict=True):
            for r0, r1 in zip(g0["rules"], g1["rules"], strict=True):
                assert r1["expr"].count(f" / {SPEED})") == len(re.findall(r"\b(?:rate|deriv)\(", r0["expr"]))
                after_expr = _unwrap(r1["expr"])
                before, after = DURATIONS.findall(r0["expr"]), DURATIONS.findall(after_expr)
                assert len(before) == len(after), r0["expr"]
                for b, a in zip(before, after, strict=True):
                    for x, y in zip(b, a, strict=True):
                        assert bool(x) == bool(y)
                        if x:
                            assert duration_ms(x) == SPEED * duration_ms(y), (r0["expr"], x, y)
                # thresholds and label matchers are untouched
                assert _shape(r0["expr"]) == _shape(after_expr)
                if "for" in r0:
                    assert duration_ms(r0["for"]) == SPEED * duration_ms(r1["for"])
                assert {k: v for k, v in r0.items() if k not in ("expr", "for")} == \
                    {k: v for k, v in r1.items() if k not in ("expr", "for")}


@pytest.mark.real
def test_scaled_rules_pass_promtool(tmp_path):
    require_tool("promtool")
    from infersight.alerts import tools

    paths = []
    for path, text in render_all(Config()).items():
        if path.startswith("rules/"):
            target = tmp_path / path.split("/", 1)[1]
            target.write_text(yaml.safe_dump(scale_rule_file(yaml.safe_load(text), SPEED), sort_keys=False))
            paths.append(target)
    result = tools.check_rules(paths)
    assert result.ok, result.output


@pytest.mark.real
def test_alertmanager_waits_scale_and_pass_amtool(tmp_path):
    require_tool("amtool")
    from infersight.alerts import tools

    config = yaml.safe_load(render_all(Config())["alertmanager.yml"])
    scaled = scale_alertmanager(config, SPEED)
    assert scaled["route"]["group_wait"] == "500ms" and scaled["route"]["group_interval"] == "5s"
    assert scaled["route"]["routes"][0]["group_interval"] == "1s"
    assert scaled["receivers"] == config["receivers"] and scaled["inhibit_rules"] == config["inhibit_rules"]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(scaled))
    result = tools.check_alertmanager(path)
    assert result.ok, result.output

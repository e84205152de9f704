"""``infersight alerts build`` and ``list`` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest
import yaml

from infersight.alerts.rules import MODULES
from infersight.cli import main
from tests.conftest import require_tool


def test_build_writes_rules_alertmanager_and_tests(tmp_path, capsys):
    out = tmp_path / "alerts"
    assert main(["alerts", "build", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "28 alerts" in stdout and "alertmanager.yml" in stdout
    rules = sorted(p.name for p in (out / "rules").glob("*.yml"))
    assert rules == ["circuit_breaker.yml", "gpu.yml", "overload.yml", "pipeline.yml", "recording.yml",
                     "saturation.yml", "scale_out.yml", "slo.yml"]
    assert len(list((out / "tests").glob("*_test.yml"))) == 8
    am = yaml.safe_load((out / "alertmanager.yml").read_text())
    assert am["route"]["routes"][0]["receiver"] == "autoscaler"


@pytest.mark.real
def test_build_check_runs_promtool_and_amtool(tmp_path, capsys):
    require_tool("promtool")
    require_tool("amtool")
    # The default config's promtool unit tests: every alert fires with exact labels and annotations,
    # and stays silent near its threshold (the second config's run is in test_promtool.py).
    assert main(["alerts", "build", "--out", str(tmp_path), "--check"]) == 0
    stdout = capsys.readouterr().out
    for step in ("promtool check rules: ok", "promtool test rules: ok", "amtool check-config: ok"):
        assert step in stdout
    assert len(list((tmp_path / "tests").glob("*_test.yml"))) == len(MODULES) + 1  # each rule file's, and recording's


def test_check_without_the_tools_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["alerts", "build", "--out", str(tmp_path / "o"), "--check"]) == 1
    err = capsys.readouterr().err
    assert "promtool not found on PATH" in err and "apt-get install" in err and "Traceback" not in err


def test_bad_config_is_refused_and_writes_nothing(tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text("slo:\n  ttft_objective: 0.9\n")
    out = tmp_path / "out"
    assert main(["--config", str(config), "alerts", "build", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "slo.ttft_objective 0.9" in err and "Traceback" not in err
    assert not out.exists()


def test_ttft_slo_off_the_buckets_is_a_config_error(tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text("slo:\n  ttft_seconds: 0.9\n")
    assert main(["--config", str(config), "alerts", "list"]) == 2
    assert "slo.ttft_seconds: got 0.9; must be a bucket boundary" in capsys.readouterr().err


def test_unwritable_output_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["alerts", "build", "--out", str(blocker / "sub")]) == 1
    err = capsys.readouterr().err
    assert "cannot write to" in err and "Traceback" not in err


def test_list_as_json_and_csv(capsys):
    assert main(["alerts", "list", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 28
    storm = next(r for r in rows if r["alert"] == "LLMRetryStorm")
    assert storm["severity"] == "critical" and storm["signal"] == "circuit_breaker"
    assert storm["runbook"].endswith("/alerts/runbooks/LLMRetryStorm.md")
    assert main(["alerts", "list", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "alert,severity,signal,for,summary,runbook"


def test_missing_secret_file_is_noted_not_read(tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text("alertmanager:\n  pagerduty_routing_key_file: /run/secrets/nowhere.key\n")
    assert main(["--config", str(config), "alerts", "build", "--out", str(tmp_path / "o")]) == 0
    assert "pagerduty_routing_key_file /run/secrets/nowhere.key does not exist" in capsys.readouterr().err
    assert "routing_key_file: /run/secrets/nowhere.key" in (tmp_path / "o" / "alertmanager.yml").read_text()

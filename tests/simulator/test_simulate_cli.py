"""``infersight simulate``: clear errors, and the files it promises."""

from __future__ import annotations

import yaml

from infersight.cli import main


def test_unknown_scenario_names_the_builtin_ones(capsys):
    assert main(["simulate", "--scenario", "no-such", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert "no scenario 'no-such'" in err and "healthy-baseline" in err and "Traceback" not in err


def test_hours_are_validated(capsys, tmp_path):
    assert main(["simulate", "--scenario", "gpu-off-bus", "--hours", "0", "--out", str(tmp_path)]) == 2
    assert "--hours must be" in capsys.readouterr().err


def test_a_malformed_scenario_file_says_which_key(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntitle: t\nstory: s\nminutes: 10\nfleet: []\nworkload: [{model: m, rate_per_s: -1}]\n")
    assert main(["simulate", "--scenario", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "rate_per_s" in err


def test_writes_promtool_input_series(tmp_path, capsys):
    out = tmp_path / "series"
    assert main(["simulate", "--scenario", "gpu-off-bus", "--hours", "0.05", "--format", "promtool",
                 "--out", str(out), "--quiet"]) == 0
    doc = yaml.safe_load((out / "series.yml").read_text())
    assert doc["interval"] == "1m"
    selectors = [s["series"] for s in doc["input_series"]]
    assert any(s.startswith("llm_requests_waiting{") and 'instance="sim-n01:8000"' in s for s in selectors)
    assert any(s.startswith("gpu_up{") for s in selectors)
    assert any(s.startswith("llm_instance_state{") for s in selectors)


def test_list_describes_the_scenarios(capsys):
    assert main(["simulate", "--list"]) == 0
    assert "gpu-off-bus" in capsys.readouterr().out

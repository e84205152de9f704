"""The generated rules and their unit tests, run by the real promtool (one invocation per check)."""

from __future__ import annotations

import shutil

import pytest
import yaml

from infersight.alerts import tools
from tests.conftest import require_tool

pytestmark = pytest.mark.real  # promtool


def test_promtool_check_rules_is_clean(default_build, custom_build):
    require_tool("promtool")
    result = tools.check_rules([*default_build.rule_files, *custom_build.rule_files])
    assert result.ok, result.output
    assert result.output.count("SUCCESS") == len(default_build.rule_files) + len(custom_build.rule_files)
    assert "WARNING" not in result.output


def test_promtool_unit_tests_pass_for_a_second_config(custom_build):
    """Every alert fires with exact labels and annotations, and stays silent near its threshold, with
    every threshold moved off its default. The default config's tests are promtool's longest run
    (about 150 s of CPU): `alerts build --check` runs them, in tests/alerts/test_cli.py, and that run
    is not repeated here."""
    require_tool("promtool")
    files = custom_build.test_files
    result = tools.test_rules(files)
    assert result.ok, result.output
    assert result.output.count("SUCCESS") == len(files)


def test_promtool_catches_a_wrong_threshold(default_build, tmp_path):
    """The generated tests can fail: a rule file with a lowered threshold breaks a silent case."""
    require_tool("promtool")
    copy = tmp_path / "out"
    shutil.copytree(default_build.out, copy)
    rules = copy / "rules" / "overload.yml"
    doc = yaml.safe_load(rules.read_text())
    rule = next(r for r in doc["groups"][0]["rules"] if r["alert"] == "LLMRejectionRateHigh")
    rule["expr"] = rule["expr"].rsplit(">", 1)[0] + "> 0.01"
    rules.write_text(yaml.safe_dump(doc))
    result = tools.test_rules([copy / "tests" / "overload_test.yml"])
    assert not result.ok
    assert "LLMRejectionRateHigh [critical] silent: rejections just under the ratio" in result.output

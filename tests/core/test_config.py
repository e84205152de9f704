import re
from pathlib import Path

import pytest

from infersight.cli import main
from infersight.config import ConfigError, load_config, parse_config

EXAMPLE = Path(__file__).resolve().parents[2] / "infersight.example.yaml"


def test_example_config_is_valid():
    config = load_config(EXAMPLE)
    assert config.capacity.gpu_spec().name == config.capacity.gpu


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INFERSIGHT_CONFIG", raising=False)
    assert load_config().listeners.otlp_http == "127.0.0.1:4318"


@pytest.mark.parametrize("text, fragments", [
    ("slo:\n  ttft_seconds: fast\n", ["slo.ttft_seconds", "'fast'", "valid number"]),
    ("slo:\n  ttft_objective: 1.5\n", ["slo.ttft_objective", "1.5", "less than 1"]),
    ("capacity:\n  gpu: B300\n", ["capacity.gpu", "'B300'", "H100-SXM"]),
    ("listeners:\n  proxy: localhost\n", ["listeners.proxy", "HOST:PORT"]),
    ("thresholds:\n  retry_ration: 0.2\n", ["thresholds.retry_ration", "unknown key"]),
    ("clickhouse:\n  dsn: mysql://x\n", ["clickhouse.dsn", "http://"]),
    ("capacity:\n  gpu_overrides:\n    bandwidth_bytes_per_s: -1\n", ["bandwidth_bytes_per_s", "greater than 0"]),
    ("- just\n- a list\n", ["top level must be a mapping"]),
    ("slo: [unclosed\n", ["not valid YAML", "line"]),
])
def test_bad_files_name_key_value_and_expectation(tmp_path, text, fragments):
    path = tmp_path / "infersight.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message


def test_cli_reports_bad_config_without_traceback(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("slo:\n  ttft_seconds: -3\n")
    assert main(["--config", str(path), "plan"]) == 2
    err = capsys.readouterr().err
    assert "slo.ttft_seconds" in err and "Traceback" not in err


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.yaml")


def test_gpu_overrides_apply():
    config = parse_config({"capacity": {"gpu": "H100-SXM", "gpu_overrides": {"bandwidth_bytes_per_s": 1e12}}})
    assert config.capacity.gpu_spec().bandwidth_bytes_per_s == 1e12


def test_runbooks_default_to_the_repository_named_in_pyproject():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    repository = pyproject["project"]["urls"]["Repository"].rstrip("/")
    assert parse_config({}).alertmanager.runbooks() == f"{repository}/blob/main/alerts/runbooks"
    mine = parse_config({"alertmanager": {"runbook_base_url": "https://wiki.example/runbooks/"}})
    assert mine.alertmanager.runbooks() == "https://wiki.example/runbooks"


@pytest.mark.parametrize(("section", "value", "message"), [
    ("alertmanager", {"runbook_base_url": "runbooks/"}, "alertmanager.runbook_base_url: got 'runbooks/'"),
    ("grafana", {"url": "grafana:3000"}, "grafana.url: got 'grafana:3000'; expected a URL"),
])
def test_link_bases_must_be_urls(section, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config({section: value})


def test_grafana_url_is_optional_and_trimmed():
    assert parse_config({}).grafana.url is None
    assert parse_config({"grafana": {"url": "http://127.0.0.1:3000/"}}).grafana.url == "http://127.0.0.1:3000"

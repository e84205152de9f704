"""`infersight dashboards build`: the files it writes, --format json, and clear errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from infersight.cli import main


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_build_writes_dashboards_and_provisioning(tmp_path, capsys):
    code, out, err = run(["dashboards", "build", "--out", str(tmp_path / "grafana"), "--format", "json"], capsys)
    assert code == 0, err
    listed = json.loads(out)
    written = sorted(p.relative_to(tmp_path / "grafana").as_posix() for p in (tmp_path / "grafana").rglob("*")
                     if p.is_file())
    assert sorted(r["path"].split("grafana/", 1)[1] for r in listed) == written
    assert [r["kind"] for r in listed].count("dashboard") == 10
    for row in listed:
        if row["kind"] == "dashboard":
            board = json.loads(open(row["path"]).read())
            assert board["title"] == row["title"] and row["panels"] == sum(p["type"] != "row" for p in board["panels"])
    provider = yaml.safe_load((tmp_path / "grafana/provisioning/dashboards/infersight.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == str((tmp_path / "grafana/dashboards").resolve())
    sources = yaml.safe_load((tmp_path / "grafana/provisioning/datasources/infersight.yaml").read_text())
    assert {s["type"] for s in sources["datasources"]} == {"prometheus", "grafana-clickhouse-datasource"}


def test_config_urls_and_dashboards_path(tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text("prometheus:\n  url: http://prom.example:9090\nclickhouse:\n  dsn: http://ch.example:8123/traces\n")
    code, out, _ = run(["--config", str(config), "dashboards", "build", "--out", str(tmp_path / "o"),
                        "--dashboards-path", "/var/lib/grafana/infersight"], capsys)
    assert code == 0 and "infersight / Fleet overview" in out  # the table
    sources = yaml.safe_load((tmp_path / "o/provisioning/datasources/infersight.yaml").read_text())["datasources"]
    assert sources[0]["url"] == "http://prom.example:9090"
    assert sources[1]["jsonData"]["host"] == "ch.example" and sources[1]["jsonData"]["defaultDatabase"] == "traces"
    provider = yaml.safe_load((tmp_path / "o/provisioning/dashboards/infersight.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/infersight"
    traces = (tmp_path / "o/dashboards/infersight-traces.json").read_text()
    assert "`traces`.otel_traces" in traces


@pytest.mark.parametrize(("yaml_text", "words"), [
    ("clickhouse:\n  dsn: chdb://data\n", "in-process engine"),
    ("prometheus:\n  url: null\n", "prometheus.url is not set"),
    ("thresholds:\n  instance_p99_ttft_seconds: 640\n", "could never fire"),
    ("thresholds:\n  instance_p99_ttft_seconds: 3\n", "not a bucket bound"),
])
def test_bad_config_is_refused_and_writes_nothing(tmp_path, capsys, yaml_text, words):
    config = tmp_path / "infersight.yaml"
    config.write_text(yaml_text)
    code, out, err = run(["--config", str(config), "dashboards", "build", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and words in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_unwritable_output_is_an_error_not_a_traceback(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = run(["dashboards", "build", "--out", str(blocker)], capsys)
    assert code == 1 and "cannot write to" in err


def test_help_and_missing_out():
    help_text = subprocess.run([sys.executable, "-m", "infersight", "dashboards", "build", "--help"],
                               capture_output=True, text=True, check=True).stdout
    assert "--out DIR" in help_text and "--format" in help_text and "provisioning" in help_text
    missing = subprocess.run([sys.executable, "-m", "infersight", "dashboards", "build"], capture_output=True,
                             text=True)
    assert missing.returncode == 2 and "--out" in missing.stderr

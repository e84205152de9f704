"""``infersight collect engine``: --once output, target parsing, and clear errors."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.cli import main
from infersight.collectors.engine.targets import TargetError, parse_file_sd, parse_target_arg
from infersight.signals import engine as sig
from tests.collectors.engine_server import EngineServer
from tests.conftest import FIXTURES

VLLM = (FIXTURES / "metrics" / "vllm_metrics_sample.txt").read_text()


@pytest.fixture
def server():
    srv = EngineServer()
    srv.add("/metrics", VLLM)
    yield srv
    srv.stop()


def test_once_prints_the_normalized_exposition(server, capsys):
    assert main(["collect", "engine", "--target", f"vllm={server.url('/metrics')}", "--once"]) == 0
    out = capsys.readouterr().out
    names = {s.name for f in text_string_to_metric_families(out) for s in f.samples}
    assert {sig.UP.name, sig.KV_CACHE_USAGE.name, sig.PREFIX_CACHE_HITS.name, sig.TTFT.name + "_bucket"} <= names
    assert not any(name.startswith("vllm:") for name in names)


def test_prometheus_is_the_format_name_and_prom_its_deprecated_alias(server, capsys):
    # One name across the collectors (collect gpu said prometheus, engine and gateway prom): the old one still works.
    target = ["collect", "engine", "--target", f"vllm={server.url('/metrics')}", "--once"]
    assert main([*target, "--format", "prometheus"]) == 0
    canonical = capsys.readouterr()
    assert main([*target, "--format", "prom"]) == 0
    alias = capsys.readouterr()
    assert {s.name for f in text_string_to_metric_families(alias.out) for s in f.samples} == \
        {s.name for f in text_string_to_metric_families(canonical.out) for s in f.samples}
    assert "--format prom is deprecated; use --format prometheus" in alias.err and "deprecated" not in canonical.err
    with pytest.raises(SystemExit):
        main([*target, "--format", "promql"])
    err = capsys.readouterr().err  # the alias works but is not advertised
    assert "invalid choice: 'promql'" in err and "prometheus" in err and "'prom'" not in err


def test_once_json_status_and_exit_code_on_failure(server, capsys):
    rc = main(["collect", "engine", "--target", server.url("/metrics"), "--target", "sglang=http://127.0.0.1:1/metrics",
               "--once", "--format", "json", "--timeout", "1"])
    captured = capsys.readouterr()
    assert rc == 1
    rows = {row["instance"]: row for row in json.loads(captured.out)}
    assert rows[f"127.0.0.1:{server.port}"]["up"] == 1 and rows[f"127.0.0.1:{server.port}"]["engine"] == "vllm"
    assert rows["127.0.0.1:1"]["up"] == 0 and rows["127.0.0.1:1"]["error"] == "down"
    assert "127.0.0.1:1" in captured.err and "down" in captured.err


def test_targets_from_the_config_file(server, tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text(f"engines:\n  targets:\n    - {{url: '{server.url('/metrics')}', instance: gpu-node-7:8000,"
                      " pool: canary, node: n7, gpu: '0,1'}\n")
    assert main(["--config", str(config), "collect", "engine", "--once"]) == 0
    samples = [s for f in text_string_to_metric_families(capsys.readouterr().out) for s in f.samples
               if s.name == sig.REQUESTS_WAITING.name]
    assert [(s.labels["instance"], s.labels["pool"], s.labels["node"], s.labels["gpu"]) for s in samples] == [
        ("gpu-node-7:8000", "canary", "n7", "0,1")]


@pytest.mark.parametrize("argv, message", [
    ([], "no engine targets"),
    (["--target", "mystery=http://h:1/metrics"], "unknown engine 'mystery'"),
    (["--target", "vllm=h:8000/metrics"], "not an http(s) URL"),
    (["--target", "http://h:99999/metrics"], "invalid port"),
    (["--target", "http://a:1/metrics", "--target", "http://a:1/metrics"], "two targets with instance"),
    (["--target", "http://a:1/metrics", "--timeout", "0"], "must be positive"),
    (["--target", "http://a:1/metrics", "--listen", "nowhere"], "expected HOST:PORT"),
    (["--target", "http://a:1/metrics", "--listen", "127.0.0.1:99999"], "between 0 and 65535"),
])
def test_bad_arguments_exit_2_with_a_clear_message(argv, message, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray infersight.yaml
    monkeypatch.delenv("INFERSIGHT_CONFIG", raising=False)
    assert main(["collect", "engine", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_target_in_config_names_the_key(tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text("engines:\n  targets:\n    - {url: 'ftp://x/metrics'}\n")
    assert main(["--config", str(config), "collect", "engine", "--once"]) == 2
    assert "engines.targets.0" in capsys.readouterr().err


def test_target_argument_forms():
    assert parse_target_arg("vllm=http://h:8000/metrics").engine == "vllm"
    auto = parse_target_arg("http://h:8000/metrics?a=b")
    assert auto.engine == "auto" and auto.url == "http://h:8000/metrics?a=b" and auto.instance == "h:8000"
    assert parse_target_arg("TGI=http://h:80/metrics").engine == "tgi"
    assert parse_target_arg("http://h:80/prometheus/metrics").instance == "h:80/prometheus/metrics"
    # The instance is the endpoint host:port (DESIGN 10): the port defaulted as Prometheus does,
    # no credentials, IPv6 bracketed.
    assert parse_target_arg("https://u:pw@h/metrics").instance == "h:443"
    assert parse_target_arg("http://h/metrics").instance == "h:80"
    assert parse_target_arg("http://[::1]:8000/metrics").instance == "[::1]:8000"


def test_file_sd_parsing_and_errors():
    targets = parse_file_sd(json.dumps([{"targets": ["a:1", "b:2"], "labels": {
        "__scheme__": "https", "__metrics_path__": "/prometheus/metrics", "engine": "trtllm", "node": "n2"}}]),
        "sd.json")
    assert [t.url for t in targets] == ["https://a:1/prometheus/metrics", "https://b:2/prometheus/metrics"]
    assert {t.engine for t in targets} == {"trtllm"} and {t.node for t in targets} == {"n2"}
    yaml_targets = parse_file_sd("- targets: ['c:3']\n  labels: {pool: canary}\n", "sd.yml")
    assert yaml_targets[0].pool == "canary" and yaml_targets[0].instance == "c:3"
    named = parse_file_sd('[{"targets": ["10.0.0.5:9400"], "labels": {"instance": "10.0.0.5:8000"}}]', "sd.json")
    assert named[0].instance == "10.0.0.5:8000"  # a metrics sidecar named after the engine port it serves
    for text, message in [("{}", "expected a list"), ('[{"labels": {}}]', "group 0"),
                          ('[{"targets": ["http://a:1/metrics"]}]', "not HOST:PORT"),
                          ('[{"targets": ["a:1"], "labels": {"engine": "x"}}]', "unknown engine"),
                          ('[{"targets": ["a:1"], "labels": {"pool": 3}}]', "string values"),
                          ('[{"targets": ["a:1", "a:1"]}]', "two targets with instance")]:
        with pytest.raises(TargetError, match=message):
            parse_file_sd(text, "sd.json")


def test_once_with_a_missing_file_sd_says_so(tmp_path, capsys):
    assert main(["collect", "engine", "--file-sd", str(tmp_path / "absent.json"), "--once", "--format", "csv"]) == 1
    captured = capsys.readouterr()
    assert "absent.json" in captured.err and captured.out.strip() == "instance,engine,up,series,seconds,error,detail"

"""``infersight prometheus render``: jobs our alerts find, honor_labels, rule_files, real promtool and Prometheus."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml
from prometheus_client import CollectorRegistry

from infersight.alerts import recording as rec
from infersight.cli import main
from infersight.collectors.engine.collector import EngineCollector
from infersight.collectors.engine.targets import Target
from infersight.collectors.exporter import serve
from infersight.collectors.gpu.app import GPUExporter
from infersight.collectors.gpu.sim import SimBackend
from infersight.signals import engine
from tests.collectors.engine_server import VLLM, EngineServer
from tests.conftest import PrometheusServer, free_port, require_tool, wait_http


def render(capsys, *argv: str, config=None) -> dict:
    prefix = ["--config", str(config)] if config else []
    assert main([*prefix, "prometheus", "render", "--format", "json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_default_jobs_match_exporter_jobs_and_honor_labels(capsys):
    doc = render(capsys)
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert list(jobs) == ["infersight-gpu", "infersight-receiver"]  # no engines configured: no engine job
    for job in jobs.values():
        assert job["honor_labels"] is True
        assert re.fullmatch("infersight.*", job["job_name"])
    assert jobs["infersight-gpu"]["static_configs"] == [{"targets": ["127.0.0.1:9835"]}]
    assert "rule_files" not in doc and doc["global"]["scrape_interval"] == "15s"


def test_engines_in_the_config_add_the_engine_job_and_names_follow_the_prefix(capsys, tmp_path):
    config = tmp_path / "infersight.yaml"
    config.write_text("thresholds: {exporter_jobs: 'ml-.*'}\nprometheus: {job_prefix: ml-}\n"
                      "listeners: {engine_exporter: '0.0.0.0:9900'}\n"
                      "engines: {targets: [{url: 'http://10.0.0.5:8000/metrics'}]}\n")
    doc = render(capsys, "--alertmanager", "127.0.0.1:9093", config=config)
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in doc["scrape_configs"]}
    assert jobs == {"ml-gpu": ["127.0.0.1:9835"], "ml-engine": ["127.0.0.1:9900"], "ml-receiver": ["127.0.0.1:4318"]}
    assert doc["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    config.write_text(config.read_text() + "gateways: {targets: [{url: 'http://epp:9090/metrics', kind: epp}]}\n")
    jobs = [j["job_name"] for j in render(capsys, config=config)["scrape_configs"]]
    assert jobs == ["ml-gpu", "ml-engine", "ml-gateway", "ml-receiver"]
    doc = render(capsys, "--job", "proxy", "--host", "10.1.2.3", config=config)
    assert doc["scrape_configs"][0]["static_configs"] == [{"targets": ["10.1.2.3:8081"]}]


@pytest.mark.parametrize(("argv", "yaml_text", "message"), [
    ([], "thresholds: {exporter_jobs: 'exporters-.*'}\n", "does not match thresholds.exporter_jobs"),
    (["--job", "nope"], "", "unknown job 'nope'"),
    (["--scrape-interval", "fast"], "", "expected a duration"),
    (["--alertmanager", "nohost"], "", "expected HOST:PORT"),
    (["--rules", "missing-dir"], "", "run `infersight alerts build --out missing-dir` first"),
])
def test_bad_input_is_a_clear_error(capsys, tmp_path, argv, yaml_text, message):
    config = tmp_path / "infersight.yaml"
    config.write_text(yaml_text)
    assert main(["--config", str(config), "prometheus", "render", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.real
def test_check_runs_promtool_on_the_config_and_its_rule_files(capsys, tmp_path, monkeypatch):
    require_tool("promtool")
    monkeypatch.chdir(tmp_path)
    assert main(["alerts", "build", "--out", "alerts"]) == 0
    (tmp_path / "etc").mkdir()
    assert main(["prometheus", "render", "--rules", "alerts", "--out", "etc/prometheus.yml", "--check"]) == 0
    err = capsys.readouterr().err
    rule_files = len(list((tmp_path / "alerts" / "rules").glob("*.yml")))
    assert f"promtool check config: ok ({rule_files} rule files)" in err
    doc = yaml.safe_load((tmp_path / "etc" / "prometheus.yml").read_text())
    assert doc["rule_files"] == ["../alerts/rules/*.yml"]  # relative to the config file, as Prometheus reads it

    # A broken rule file among them fails the check.
    (tmp_path / "alerts" / "rules" / "zz_broken.yml").write_text(
        "groups: [{name: x, rules: [{alert: A, expr: 'up =='}]}]\n")
    assert main(["prometheus", "render", "--rules", "alerts", "--check"]) == 1
    assert "promtool check config failed" in capsys.readouterr().err


@pytest.mark.real
def test_a_real_prometheus_runs_the_rendered_config(capsys, tmp_path, monkeypatch):
    """Prometheus on the rendered file: every job up, the engine endpoint kept as instance, rules evaluated."""
    binary = require_tool("prometheus")
    monkeypatch.chdir(tmp_path)
    gpu_port, engine_port = free_port(), free_port()
    config = tmp_path / "infersight.yaml"
    config.write_text(f"listeners: {{gpu_exporter: '127.0.0.1:{gpu_port}', "
                      f"engine_exporter: '127.0.0.1:{engine_port}'}}\n")
    assert main(["alerts", "build", "--out", "alerts"]) == 0
    assert main(["--config", str(config), "prometheus", "render", "--job", "gpu", "--job", "engine",
                 "--rules", "alerts", "--scrape-interval", "1s", "--out", "prometheus.yml"]) == 0

    sim = SimBackend(1, "H100-SXM", node="n1")
    sim.set_load(0, compute=0.2, bandwidth=0.8)
    exporter = GPUExporter(sim, "n1", interval_seconds=0.25)
    engines = EngineServer()
    collector = EngineCollector([Target(engines.add("/metrics", VLLM), engine="vllm", node="n1", gpu="0")])
    registry = CollectorRegistry()
    registry.register(collector)
    prom_port = free_port()
    proc = None
    try:
        exporter.start(f"127.0.0.1:{gpu_port}")
        engine_server, _ = serve(registry, f"127.0.0.1:{engine_port}")
        proc = subprocess.Popen([binary, "--config.file=prometheus.yml", f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
        prom = PrometheusServer.__new__(PrometheusServer)  # reuse its query helpers on our own process
        prom.url, prom.dir = f"http://127.0.0.1:{prom_port}", tmp_path
        wait_http(prom.url + "/-/ready", expect=b"Ready")
        up = prom.wait_for('up{job=~"infersight.*"} == 1', timeout=30)
        prom.wait_for('count(up{job=~"infersight.*"} == 1) == 2', timeout=30)
        assert {r["metric"]["job"] for r in up} <= {"infersight-gpu", "infersight-engine"}
        # honor_labels: the engine's series keep the engine endpoint as instance, not the collector's address.
        waiting = prom.wait_for(engine.REQUESTS_WAITING.select())
        assert {r["metric"]["instance"] for r in waiting} == {f"127.0.0.1:{engines.port}"}
        # The rules of `alerts build` are loaded and evaluated.
        prom.wait_for(rec.BANDWIDTH_AVG5M, timeout=30)
        engine_server.shutdown()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        collector.close()
        engines.stop()
        exporter.stop()


@pytest.mark.real
def test_the_demo_renders_its_prometheus_config_with_the_same_renderer(tmp_path):
    """The demo's jobs (a metrics path, a slower engine job, GPUs by file_sd) come from prometheus_config.render:
    the same job names, honor_labels and header as `prometheus render`, and promtool accepts the file."""
    from types import SimpleNamespace

    from infersight.alerts import tools
    from infersight.commands.demo_run import DemoRun
    from infersight.config import Config

    require_tool("promtool")
    run = DemoRun(Config(), scenario=None, minutes=1, out=tmp_path, binaries={}, quiet=True)
    gpu_sd = tmp_path / "gpu_targets.json"
    gpu_sd.write_text("[]")
    path = run._prometheus_config("http://127.0.0.1:9093", SimpleNamespace(gateway_target="127.0.0.1:7001"), 7002,
                                  SimpleNamespace(http_url="http://127.0.0.1:7003"), gpu_sd)
    text = path.read_text()
    assert text.startswith("# Rendered by `infersight demo` from infersight.yaml.")
    doc = yaml.safe_load(text)
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert list(jobs) == ["infersight-gateway", "infersight-engine", "infersight-gpu", "infersight-receiver"]
    assert all(j["honor_labels"] is True for j in jobs.values())
    assert jobs["infersight-gateway"]["metrics_path"] == "/gateway/metrics"
    assert jobs["infersight-engine"]["scrape_interval"] == jobs["infersight-engine"]["scrape_timeout"] == "2s"
    assert jobs["infersight-gpu"]["file_sd_configs"] == [{"files": [str(gpu_sd)], "refresh_interval": "1s"}]
    assert jobs["infersight-receiver"]["static_configs"] == [{"targets": ["127.0.0.1:7003"]}]
    assert doc["rule_files"] == [str(tmp_path / "rules" / "*.yml")]
    assert doc["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    result = tools.check_config(path)
    assert result.ok, result.output

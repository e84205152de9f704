"""``infersight collect gpu``: --once outputs, serving until SIGTERM, and clear errors for bad input."""

from __future__ import annotations

import json
import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.cli import main
from infersight.signals import gpu
from tests.collectors.served_cli import scrape_then_sigterm

SIM_ONCE = ["collect", "gpu", "--backend", "sim", "--once", "--interval", "0.05", "--node", "n7"]


def test_once_prom_is_accepted_as_the_old_name_of_prometheus(capsys):
    assert main([*SIM_ONCE, "--sim-count", "1", "--format", "prom"]) == 0
    captured = capsys.readouterr()
    assert "gpu_up" in {f.name for f in text_string_to_metric_families(captured.out)}
    assert "use --format prometheus" in captured.err


def test_once_json_reflects_the_simulated_load(capsys):
    assert main([*SIM_ONCE, "--sim-count", "3", "--sim-load", "0.2,0.7", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["gpu"] for row in rows] == [0, 1, 2]
    for row in rows:
        assert row["up"] == 1 and row["node"] == "n7" and row["gpu_model"] == "H100-SXM"
        assert row["bandwidth_source"] == "gpm"
        assert row["bandwidth_utilization"] == pytest.approx(0.7)
        assert 70 < row["power_watts"] < 700 and row["energy_joules"] > 0


def test_once_prometheus_text_parses(capsys):
    assert main([*SIM_ONCE, "--sim-count", "2", "--sim-type", "L40S"]) == 0
    families = {f.name: f for f in text_string_to_metric_families(capsys.readouterr().out)}
    up = families["gpu_up"].samples
    assert [(s.labels["gpu"], s.labels["gpu_model"], s.value) for s in up] == [("0", "L40S", 1.0), ("1", "L40S", 1.0)]
    source = {s.labels["source"] for s in families["gpu_memory_bandwidth_utilization_ratio"].samples}
    assert source == {"nvml_busy"}  # L40S has no GPM


def test_once_table_and_csv(capsys):
    assert main([*SIM_ONCE, "--sim-count", "1", "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("node,gpu,uuid,gpu_model,up,bandwidth_utilization,bandwidth_source")
    assert main([*SIM_ONCE, "--sim-count", "1", "--format", "table"]) == 0
    assert "bandwidth_source" in capsys.readouterr().out


def test_gpus_section_of_the_config_is_used(tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text("gpus:\n  backend: sim\n  node: cfg-node\n  sample_interval_seconds: 0.05\n"
                      "  sim: {count: 2, type: A100-80G, compute: 0.1, bandwidth: 0.4}\n")
    assert main(["--config", str(config), "collect", "gpu", "--once", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["node"], r["gpu_model"], r["bandwidth_source"]) for r in rows] == [("cfg-node", "A100-80G",
                                                                                  "nvml_busy")] * 2
    assert rows[0]["bandwidth_utilization"] == pytest.approx(0.5)  # memory busy = 1.25 x bandwidth


@pytest.mark.parametrize("extra, message", [
    (["--sim-load", "lots"], "expected COMPUTE,BANDWIDTH"),
    (["--sim-load", "1.5,0.2"], "between 0 and 1"),
    (["--sim-count", "0"], "at least one GPU"),
    (["--interval", "0"], "must be positive"),
    (["--otlp-endpoint", "collector:4318"], "expected a URL like http://"),
])
def test_bad_options_exit_2_with_a_reason(extra, message, capsys):
    assert main([*SIM_ONCE, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_config_value_is_reported_with_its_key(tmp_path, capsys):
    config = tmp_path / "infersight.yaml"
    config.write_text("gpus:\n  sim: {type: B300}\n")
    assert main(["--config", str(config), "collect", "gpu", "--once"]) == 2
    assert "gpus.sim.type" in capsys.readouterr().err


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:99999"])
def test_bad_listen_address_exits_2(listen, capsys):
    assert main(["collect", "gpu", "--backend", "sim", "--listen", listen]) == 2
    assert "cannot listen on" in capsys.readouterr().err


def test_port_in_use_exits_2(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["collect", "gpu", "--backend", "sim", "--listen", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--listen" in err


def test_serves_until_sigterm():
    body = scrape_then_sigterm(
        ["collect", "gpu", "--backend", "sim", "--sim-count", "2", "--listen", "127.0.0.1:0", "--interval", "0.1"],
        lambda line: line.startswith("serving 2 GPUs (sim) on http://127.0.0.1:"))
    assert body.count(f"{gpu.UP.name}{{") == 2

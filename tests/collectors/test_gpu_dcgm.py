"""dcgm-exporter as a GPU source: the mapping, unit conversions, absent fields, XIDs, failures, the CLI."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.cli import main
from infersight.collectors.gpu.dcgm import parse
from infersight.collectors.gpu.dcgm_collector import DcgmCollector, DcgmSource, exposition
from infersight.signals import gpu
from tests.collectors.engine_server import EngineServer
from tests.collectors.served_cli import scrape_then_sigterm
from tests.conftest import FIXTURES

DEFAULT = (FIXTURES / "metrics" / "dcgm_exporter_metrics_rendered.txt").read_text()
EXTENDED = (FIXTURES / "metrics" / "dcgm_exporter_extended_handwritten.txt").read_text()
UUID0 = "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b"


def samples(text: str) -> dict[str, list]:
    """Samples by series name (counters with their _total)."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def one(families: dict, name: str, **labels: str) -> float:
    found = [s.value for s in families.get(name, ()) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


@pytest.fixture
def served():
    server = EngineServer()
    yield server
    server.stop()


def scrape_text(url: str, **kwargs) -> tuple[DcgmCollector, str]:
    collector = DcgmCollector([DcgmSource(url, **kwargs)], log_changes=False)
    return collector, exposition(collector, collector.scrape())


def test_default_counters_map_onto_catalog_signals_in_base_units(served):
    collector, text = scrape_text(served.add("/metrics", DEFAULT))
    collector.close()
    fam = samples(text)
    g0 = {"node": "gpu-node-01", "gpu": "0", "uuid": UUID0, "gpu_model": "NVIDIA H100 80GB HBM3"}
    assert one(fam, gpu.UP.name, **g0) == 1
    assert one(fam, gpu.MEMORY_BANDWIDTH_UTILIZATION.name, source="dcgm", **g0) == 0.734412
    assert one(fam, gpu.UTILIZATION.name, **g0) == 1.0  # 100 %
    assert one(fam, gpu.MEMORY_BUSY.name, **g0) == 0.63  # 63 %
    assert one(fam, gpu.ENERGY.name, **g0) == 55491669.881  # 55491669881 mJ
    assert one(fam, gpu.SM_CLOCK.name, **g0) == 1980e6  # MHz
    assert one(fam, gpu.MEMORY_CLOCK.name, **g0) == 2619e6
    assert one(fam, gpu.MEMORY_USED.name, **g0) == 79541 * 2**20  # MiB
    assert one(fam, gpu.MEMORY_TOTAL.name, **g0) == (79541 + 1571 + 533) * 2**20  # used + free + reserved
    assert one(fam, gpu.POWER.name, **g0) == 612.347
    assert one(fam, gpu.TEMPERATURE.name, **g0) == 47
    assert one(fam, gpu.TENSOR_ACTIVITY.name, **g0) == 0.412877
    assert one(fam, gpu.PCIE_THROUGHPUT.name, direction="rx", **g0) == 43211297
    assert one(fam, gpu.INFO.name, driver_version="570.124.06", **g0) == 1
    # The Kubernetes attribution is its own info series, GPU 1 runs no pod.
    pods = fam[gpu.POD_INFO.name]
    assert [(s.labels["gpu"], s.labels["namespace"], s.labels["pod"], s.labels["container"]) for s in pods] == [
        ("0", "inference", "qwen3-8b-7d9f6c5b8-x2k4p", "vllm")]
    # No DCGM name or DCGM label leaks through.
    assert not [name for name in fam if name.startswith("DCGM")]
    assert not [s for series in fam.values() for s in series if "pci_bus_id" in s.labels or "err_code" in s.labels]


def test_what_default_counters_lack_is_absent_not_zero():
    (g0, _g1) = parse(DEFAULT)
    reading = g0.reading
    for missing in ("sm_activity", "sm_occupancy", "ecc_errors", "clock_events", "power_limit_watts",
                    "nvlink_bytes_per_second"):
        assert getattr(reading, missing) is None, missing


def test_custom_counters_old_labels_mig_and_blanks():
    g0, g1 = parse(EXTENDED)
    assert (g0.node, g0.identity.uuid) == ("a100-node-7", "GPU-aaaa0000-0000-0000-0000-000000000000")
    assert g0.pods == {("llm", "sglang-0", "sglang")}  # pod_namespace / pod_name / container_name
    r0 = g0.reading
    assert (r0.sm_activity, r0.sm_occupancy) == (0.31, 0.22)
    assert r0.ecc_errors == {"corrected": 12, "uncorrected": 1}
    assert r0.power_limit_watts == 400
    assert r0.memory_total_bytes == 81920 * 2**20  # FB_TOTAL wins over the sum of the parts
    assert r0.nvlink_bytes_per_second == {"rx": 2.4e9, "tx": 2.5e9}
    assert {k for k, v in r0.clock_events.items() if v} == {"sw_power_cap", "hw_thermal"}  # 0x44
    assert g0.last_xid == 13
    # MIG: the whole-GPU sample is the GPU's value, instance samples are not mixed in; a pod on an instance
    # still attributes the GPU.
    assert g1.reading.sm_activity == 0.5
    assert g1.pods == {("llm", "vllm-mig-0", "vllm")}
    assert g1.reading.power_watts is None  # DCGM's blank sentinel is no reading
    assert g1.reading.memory_total_bytes is None  # no FB_TOTAL, and no parts to add up


# Every known code exists at 0 (as the NVML collector creates them), the last code reads 1.
NO_XID = dict.fromkeys(gpu.KNOWN_XIDS, 0)


@pytest.mark.parametrize(("last", "expected"), [
    (0, NO_XID),
    (79, {**NO_XID, "79": 1}),
    (13, {**NO_XID, "13": 1}),
    (119, {**NO_XID, "119": 1}),  # a code outside the known list appears at 1
])
def test_last_xid_becomes_the_catalog_counter(served, last, expected):
    text = DEFAULT.replace('err_msg="GPU has fallen off the bus"} 79', f'err_msg="x"}} {last}')
    collector, out = scrape_text(served.add("/metrics", text))
    collector.close()
    xids = {s.labels["xid"]: s.value for s in samples(out)[gpu.XID_ERRORS.name] if s.labels["gpu"] == "1"}
    assert xids == expected


def test_a_failing_source_reads_gpu_up_0_for_the_gpus_it_showed(served):
    state = {"body": DEFAULT.encode(), "status": 200}
    url = served.add("/metrics", lambda: state["body"])
    collector = DcgmCollector([DcgmSource(url)], timeout=1.0, log_changes=False)
    try:
        assert one(samples(exposition(collector, collector.scrape())), gpu.UP.name, gpu="1") == 1
        served.routes["/metrics"].status = 500
        down = samples(exposition(collector, collector.scrape()))
        assert [s.value for s in down[gpu.UP.name]] == [0, 0]
        assert gpu.POWER.name not in down and gpu.ENERGY.name not in down  # no stale numbers
        assert one(down, gpu.COLLECTOR_ERRORS.name, call="dcgm_scrape_http_status", node="gpu-node-01") == 1
        assert one(down, gpu.COLLECTOR_DEVICES.name) == 0

        served.routes["/metrics"].status = 200
        state["body"] = b"<html>not metrics</html>"
        garbage = collector.scrape()
        assert garbage[0].reason == "malformed"
        state["body"] = b"# TYPE something gauge\nsomething 1\n"
        assert collector.scrape()[0].reason == "unrecognized"

        # GPU 1 vanishes from the exporter: it reads down, GPU 0 carries on.
        state["body"] = "\n".join(line for line in DEFAULT.splitlines() if 'gpu="1"' not in line).encode()
        partial = samples(exposition(collector, collector.scrape()))
        assert {s.labels["gpu"]: s.value for s in partial[gpu.UP.name]} == {"0": 1, "1": 0}
        assert [s.labels["gpu"] for s in partial[gpu.POWER.name]] == ["0"]
    finally:
        collector.close()


def test_node_override_and_a_dead_source_alongside_a_live_one(served):
    live = served.add("/metrics", DEFAULT)
    collector = DcgmCollector([DcgmSource(live, node="n9"), DcgmSource("http://127.0.0.1:1/metrics")],
                              timeout=1.0, log_changes=False)
    try:
        results = collector.scrape()
        assert [r.up for r in results] == [True, False]
        fam = samples(exposition(collector, results))
        assert {s.labels["node"] for s in fam[gpu.UP.name]} == {"n9"}
        assert one(fam, gpu.COLLECTOR_ERRORS.name, node="127.0.0.1", call="dcgm_scrape_down") == 1
    finally:
        collector.close()


def test_cli_once_json_and_exit_codes(served, capsys):
    url = served.add("/metrics", DEFAULT)
    assert main(["collect", "gpu", "--source", url, "--once", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["gpu"], r["bandwidth_source"], r["last_xid"]) for r in rows] == [(0, "dcgm", 0), (1, "dcgm", 79)]
    assert rows[0]["pods"] == "inference/qwen3-8b-7d9f6c5b8-x2k4p"

    assert main(["collect", "gpu", "--backend", "dcgm", "--source", served.url("/nothing"), "--once"]) == 1
    assert "failed: http_status: HTTP 404" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--backend", "dcgm"], "needs a dcgm-exporter"),
    (["--source", "ftp://host/metrics"], "is not an http(s) URL"),
    (["--backend", "sim", "--source", "http://h:9400/metrics"], "--source is for --backend dcgm"),
    (["--source", "http://h:9400/metrics", "--sim-count", "2"], "do not apply to --backend dcgm"),
    (["--source", "http://a:9400/metrics", "--source", "http://b:9400/metrics", "--node", "n1"], "--node names one"),
])
def test_cli_rejects_bad_dcgm_options(capsys, argv, message):
    assert main(["collect", "gpu", *argv, "--once"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_config_sources(served, tmp_path, capsys):
    url = served.add("/metrics", DEFAULT)
    config = tmp_path / "infersight.yaml"
    config.write_text(f"gpus:\n  backend: dcgm\n  dcgm:\n    sources:\n      - {{url: '{url}', node: cfg}}\n")
    assert main(["--config", str(config), "collect", "gpu", "--once", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("cfg,0,") and lines[2].startswith("cfg,1,")
    config.write_text("gpus:\n  dcgm:\n    sources:\n      - {url: 'localhost:9400'}\n")
    assert main(["--config", str(config), "collect", "gpu", "--once"]) == 2
    assert "gpus.dcgm.sources.0.url" in capsys.readouterr().err


# -- through a real Prometheus: energy per token with dcgm-exporter as the GPU source ------------------
class LiveDcgm:
    """The default-counters fixture with GPU 0's energy counter growing at its power draw, from the clock."""

    def __init__(self, watts: float) -> None:
        import time

        self.watts, self.start, self.clock = watts, time.monotonic(), time.monotonic

    def __call__(self) -> bytes:
        millijoules = 55491669881 + self.watts * 1000 * (self.clock() - self.start)
        return DEFAULT.replace("} 55491669881", f"}} {millijoules:.0f}").encode()


@pytest.mark.real
def test_prometheus_joins_dcgm_energy_with_engine_tokens(prometheus_server, served):
    from prometheus_client import CollectorRegistry

    from infersight.collectors.engine.collector import EngineCollector
    from infersight.collectors.engine.targets import Target
    from infersight.collectors.exporter import serve
    from infersight.collectors.gpu.dcgm_collector import build_registry
    from infersight.collectors.gpu.promql import energy_per_token
    from infersight.signals import engine
    from tests.collectors.engine_server import LiveVLLM

    watts, tokens_per_second = 612.0, 1500.0
    dcgm = DcgmCollector([DcgmSource(served.add("/dcgm", LiveDcgm(watts)))], log_changes=False)
    # The engine target names the node as dcgm-exporter's hostname label does, and its GPU index.
    engines = EngineCollector([Target(served.add("/vllm", LiveVLLM(tokens_per_second)), engine="vllm",
                                      node="gpu-node-01", gpu="0")])
    registry = CollectorRegistry()
    registry.register(engines)
    gpu_server, _ = serve(build_registry(dcgm), "127.0.0.1:0")
    engine_server, _ = serve(registry, "127.0.0.1:0")
    try:
        prom = prometheus_server([f"127.0.0.1:{gpu_server.server_port}", f"127.0.0.1:{engine_server.server_port}"])
        bandwidth = prom.wait_for(gpu.MEMORY_BANDWIDTH_UTILIZATION.select(source="dcgm", gpu="0"))
        assert float(bandwidth[0]["value"][1]) == 0.734412
        for counter in (gpu.ENERGY.select(gpu="0"), engine.GENERATION_TOKENS.select()):
            prom.wait_for(f"count_over_time({counter}[15s]) >= 13", timeout=40)
        per_gpu = prom.wait_for(energy_per_token(window="5s"), timeout=30)
        # GPU 1 runs no engine: only GPU 0 has a ratio.
        assert [(r["metric"]["node"], r["metric"]["gpu"]) for r in per_gpu] == [("gpu-node-01", "0")]
        assert float(per_gpu[0]["value"][1]) == pytest.approx(watts / tokens_per_second, rel=0.3)
        # The pod that uses the GPU joins any GPU series.
        hot = prom.query(f"{gpu.TEMPERATURE.select()} * on (node, gpu) group_left (namespace, pod) "
                         f"{gpu.POD_INFO.select()}")
        assert [(r["metric"]["gpu"], r["metric"]["pod"]) for r in hot] == [("0", "qwen3-8b-7d9f6c5b8-x2k4p")]
    finally:
        gpu_server.shutdown()
        engine_server.shutdown()
        engines.close()
        dcgm.close()


def test_collect_gpu_dcgm_serves_the_mapped_series_until_sigterm(served):
    source = served.add("/metrics", DEFAULT)
    body = scrape_then_sigterm(
        ["collect", "gpu", "--backend", "dcgm", "--source", source, "--listen", "127.0.0.1:0"],
        lambda line: "serving GPUs of 1 dcgm-exporter(s) on http://127.0.0.1:" in line)
    assert f"{gpu.UP.name}{{" in body and gpu.ENERGY.name in body

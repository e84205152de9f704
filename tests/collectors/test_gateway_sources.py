"""Gateway sources: each product's exposition (written from its current source) onto catalog signals."""

from __future__ import annotations

import json

import pytest

from infersight.cli import main
from infersight.collectors.engine.normalize import NormalizeError
from infersight.collectors.engine.normalize import TargetLabels as EngineLabels
from infersight.collectors.engine.normalize import normalize as normalize_engine
from infersight.collectors.gateway.collector import GatewayCollector, GatewayTarget, TargetError, parse_target_arg
from infersight.collectors.gateway.normalize import GatewayFormatError, TargetLabels, normalize
from infersight.collectors.gateway.products import endpoint
from infersight.signals import CATALOG
from infersight.signals import gateway as gw
from infersight.signals import request as req
from infersight.signals.engine import SCRAPE_ERROR_REASONS
from tests.collectors.engine_server import EngineServer
from tests.conftest import FIXTURES

GATEWAYS = FIXTURES / "gateways"
EPP_NOW = (GATEWAYS / "llm_d_epp_dual_emission_rendered.txt").read_text()
EPP_OLD = (GATEWAYS / "llm_d_epp_legacy_only_rendered.txt").read_text()
ROUTER = (GATEWAYS / "vllm_production_stack_router_rendered.txt").read_text()
LITELLM = (GATEWAYS / "litellm_proxy_rendered.txt").read_text()
ENVOY = (GATEWAYS / "envoy_ai_gateway_otel_genai.txt").read_text()
VLLM = (FIXTURES / "metrics" / "vllm_metrics_sample.txt").read_text()


def values(normalized, signal, **labels) -> dict[tuple, float]:
    """{(label values in signal order,): value} of the samples matching ``labels`` (no histogram buckets)."""
    out = {}
    for sample in normalized.samples.get(signal, ()):
        if sample.name.endswith("_bucket") or any(sample.labels.get(k) != v for k, v in labels.items()):
            continue
        if signal.kind.value == "histogram" and not sample.name.endswith("_count"):
            continue
        out[tuple(sample.labels[k] for k in signal.labels)] = sample.value
    return out


@pytest.mark.parametrize("text", [EPP_NOW, EPP_OLD, ROUTER, LITELLM, ENVOY], ids=["epp", "epp-old", "router",
                                                                                   "litellm", "envoy"])
def test_every_series_is_a_catalog_signal_with_exactly_its_labels(text):
    normalized = normalize(text)
    assert normalized.samples
    for signal, samples in normalized.samples.items():
        assert CATALOG[signal.name] is signal
        for sample in samples:
            assert sample.name in signal.series_names()
            extra = {"le"} if sample.name.endswith("_bucket") else set()
            assert set(sample.labels) == set(signal.labels) | extra, (sample.name, sample.labels)


def test_epp_current_names_win_and_the_deprecated_twins_are_not_counted_again():
    now, old = normalize(EPP_NOW), normalize(EPP_OLD)
    assert now.kind == old.kind == "epp"
    # 400 + 100 qwen requests, 15 of them errors (503s): success = total - errors, from one generation of names.
    requests = values(now, req.REQUESTS, model="qwen3-8b")
    assert requests == {("qwen3-8b", "", "qwen-pool", "", "success"): 485,
                        ("qwen3-8b", "", "qwen-pool", "", "error"): 15}
    assert values(old, req.REQUESTS, model="qwen3-8b") == requests  # the older EPP's names give the same
    # Flow control holds 31 + 9 qwen requests across fairness groups and priorities: one queue per model and pool.
    assert values(now, gw.QUEUE_DEPTH) == {("qwen3-8b", "qwen-pool", ""): 40, ("llama-3.1-8b", "llama-pool", ""): 2}
    assert values(old, gw.QUEUE_DEPTH) == values(now, gw.QUEUE_DEPTH)
    # Families with no pool label get the pool flow control names for the model, so the source's series join.
    assert values(now, req.E2E) == {("qwen3-8b", "", "qwen-pool", ""): 500, ("llama-3.1-8b", "", "llama-pool", ""): 250}
    assert values(now, req.INPUT_TOKENS, model="qwen3-8b") == {("qwen3-8b", "", "qwen-pool", ""): 500 * 900}
    assert values(now, req.REJECTIONS) == {("qwen3-8b", "", "qwen-pool", "", "capacity"): 15}
    assert values(now, req.QUEUE_TIME, model="qwen3-8b") == {("qwen3-8b", "", "qwen-pool", ""): 485}
    assert values(now, req.TTFT, model="llama-3.1-8b") == {("llama-3.1-8b", "", "llama-pool", ""): 250}
    assert req.TTFT not in old.samples  # the older EPP has no TTFT family: absent, not zero


def test_vllm_router_server_label_is_the_instance_and_health_is_the_state():
    router = normalize(ROUTER)
    assert router.kind == "vllm-router"
    assert values(router, req.IN_FLIGHT) == {("Qwen/Qwen3-8B", "10.0.0.11:8000", "", ""): 7,
                                             ("Qwen/Qwen3-8B", "10.0.0.12:8000", "", ""): 7,
                                             ("meta-llama/Llama-3.1-8B-Instruct", "10.0.0.13:8000", "", ""): 2}
    state = values(router, gw.INSTANCE_STATE, instance="10.0.0.13:8000")
    assert state == {("meta-llama/Llama-3.1-8B-Instruct", "10.0.0.13:8000", "", "healthy"): 0,
                     ("meta-llama/Llama-3.1-8B-Instruct", "10.0.0.13:8000", "", "ejected"): 1}
    assert values(router, req.REQUESTS, instance="10.0.0.13:8000") == {
        ("meta-llama/Llama-3.1-8B-Instruct", "10.0.0.13:8000", "", "", "success"): 90,
        ("meta-llama/Llama-3.1-8B-Instruct", "10.0.0.13:8000", "", "", "error"): 30}


def test_the_engine_collector_never_takes_a_router_for_a_vllm_engine():
    with pytest.raises(NormalizeError) as refused:
        normalize_engine(ROUTER, EngineLabels("router:8001"))
    assert refused.value.reason == "unrecognized" and "collect gateway" in str(refused.value)
    assert normalize_engine(VLLM, EngineLabels("e1:8000")).engine == "vllm"  # a real engine still is one


def test_litellm_drops_people_and_keys_and_names_deployments_by_endpoint():
    lite = normalize(LITELLM)
    assert lite.kind == "litellm"
    written = {label for samples in lite.samples.values() for s in samples for label in s.labels}
    for forbidden in ("user", "end_user", "hashed_api_key", "api_key_alias", "team", "user_email", "client_ip",
                      "user_agent", "model_id", "api_base"):
        assert forbidden not in written
    text = "\n".join(f"{s.name}{s.labels}" for samples in lite.samples.values() for s in samples)
    assert "sk-hash" not in text and "alice" not in text
    # model_group / requested_model is the model on every series of a deployment, its api_base the instance.
    assert values(lite, req.REQUESTS, instance="10.0.0.22:8000") == {
        ("qwen3-8b", "10.0.0.22:8000", "", "", "success"): 40, ("qwen3-8b", "10.0.0.22:8000", "", "", "error"): 60}
    assert values(lite, gw.EJECTIONS) == {("qwen3-8b", "10.0.0.22:8000", ""): 3}  # cooled down 3 times
    assert values(lite, gw.INSTANCE_STATE, state="ejected") == {("qwen3-8b", "10.0.0.21:8000", "", "ejected"): 0,
                                                               ("qwen3-8b", "10.0.0.22:8000", "", "ejected"): 1}
    assert values(lite, req.RETRIES) == {("qwen3-8b", "", "", ""): 11}  # fallbacks: attempts after the first
    assert values(lite, req.TPOT, instance="10.0.0.21:8000") == {("qwen3-8b", "10.0.0.21:8000", "", ""): 500}


def test_otel_genai_metrics_of_envoy_ai_gateway():
    envoy = normalize(ENVOY)
    assert envoy.kind == "otel-genai"
    assert values(envoy, req.INPUT_TOKENS) == {("qwen2.5:0.5b", "", "", ""): 44}
    assert values(envoy, req.OUTPUT_TOKENS) == {("qwen2.5:0.5b", "", "", ""): 14}
    assert values(envoy, req.REQUESTS) == {("qwen2.5:0.5b", "", "", "", "success"): 1}
    ttft = [s for s in envoy.samples[req.TTFT] if s.name.endswith("_sum")]
    assert [s.value for s in ttft] == [0.42]


def test_target_labels_override_and_forced_kind():
    normalized = normalize(EPP_NOW, TargetLabels(pool="canary", strategy="prefix_aware", model="m"), kind="epp")
    assert set(values(normalized, gw.QUEUE_DEPTH)) == {("m", "canary", "prefix_aware")}
    with pytest.raises(GatewayFormatError) as wrong:
        normalize(EPP_NOW, kind="litellm")
    assert wrong.value.reason == "unrecognized"
    with pytest.raises(GatewayFormatError) as garbage:
        normalize("this is { not metrics\n")
    assert garbage.value.reason == "malformed"
    # An engine's /metrics given as a gateway: unrecognized, and the message names the right command.
    with pytest.raises(GatewayFormatError) as engine:
        normalize(VLLM)
    assert engine.value.reason == "unrecognized" and "infersight collect engine" in str(engine.value)


@pytest.mark.parametrize(("text", "expected"), [("http://10.0.0.5:8000", "10.0.0.5:8000"),
                                                ("http://10.0.0.5:8000/v1", "10.0.0.5:8000"),
                                                ("https://api.example.com/v1", "api.example.com:443"),
                                                ("10.0.0.5:8000", "10.0.0.5:8000"), ("http://[::1]:8000", "[::1]:8000"),
                                                ("", ""), ("http://host:notaport", "")])
def test_backend_urls_become_host_port(text, expected):
    assert endpoint(text) == expected


# -- the collector and the CLI -----------------------------------------------------------------------
@pytest.fixture
def served():
    server = EngineServer()
    yield server
    server.stop()


def test_collector_merges_replicas_and_reports_failed_sources(served):
    a, b = served.add("/epp-a", EPP_NOW), served.add("/epp-b", EPP_NOW)
    dead = "http://127.0.0.1:1/metrics"
    collector = GatewayCollector([GatewayTarget(a), GatewayTarget(b), GatewayTarget(dead)], timeout=1.0,
                                 log_changes=False)
    try:
        families = {f.name: f for f in collector.families(collector.scrape())}
        queue = {tuple(s.labels.values()): s.value for s in families[gw.QUEUE_DEPTH.name].samples}
        assert queue[("qwen3-8b", "qwen-pool", "")] == 80  # two EPP replicas, each holding 40
        up = {s.labels["source"]: s.value for s in families[gw.SOURCE_UP.name].samples}
        assert up == {f"127.0.0.1:{served.port}/epp-a": 1, f"127.0.0.1:{served.port}/epp-b": 1, "127.0.0.1:1": 0}
        errors = {(s.labels["source"], s.labels["reason"]): s.value
                  for s in families[gw.SOURCE_SCRAPE_ERRORS.name.removesuffix("_total")].samples}
        assert {key: count for key, count in errors.items() if count} == {("127.0.0.1:1", "down"): 1}
        # Every reason exists at 0 for every source from the first scrape (a first failure is an increase).
        assert set(errors) == {(source, reason) for source in up for reason in SCRAPE_ERROR_REASONS}
    finally:
        collector.close()


def test_target_specs():
    assert parse_target_arg("epp=http://epp:9090/metrics") == GatewayTarget("http://epp:9090/metrics", "epp")
    assert parse_target_arg("http://h:4000/metrics").kind == "auto"
    for bad in ("nginx=http://h/metrics", "ftp://h/metrics", "http://h:99999/metrics"):
        with pytest.raises(TargetError):
            parse_target_arg(bad)
    with pytest.raises(TargetError, match="two gateway targets named"):
        GatewayCollector([GatewayTarget("http://h:1/metrics"), GatewayTarget("http://h:1/metrics")])


def test_cli_once_formats_and_exit_codes(served, capsys, tmp_path):
    url = served.add("/metrics", ROUTER)
    assert main(["collect", "gateway", "--target", url, "--once", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["up"]) for r in rows] == [("vllm-router", 1)] and rows[0]["series"] > 0
    assert main(["collect", "gateway", "--target", url, "--once"]) == 0
    out = capsys.readouterr().out
    assert 'llm_instance_state{instance="10.0.0.13:8000"' in out and "vllm:" not in out
    assert main(["collect", "gateway", "--target", served.add("/404", "x", status=404), "--once"]) == 1
    assert "http_status" in capsys.readouterr().err
    for argv, message in ((["--target", "nginx=http://h/metrics"], "unknown gateway kind"), ([], "no gateway targets"),
                          (["--target", url, "--listen", "127.0.0.1:99999"], "between 0 and 65535")):
        assert main(["collect", "gateway", *argv, *([] if "--listen" in argv else ["--once"])]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    config = tmp_path / "infersight.yaml"
    config.write_text(f"gateways:\n  targets:\n    - {{url: '{url}', kind: vllm-router, pool: canary, name: router}}\n")
    assert main(["--config", str(config), "collect", "gateway", "--once"]) == 0
    assert 'pool="canary"' in capsys.readouterr().out


# -- through a real Prometheus: gateway-source series join engine series on instance ---------------------
@pytest.mark.real
def test_router_series_join_the_engine_collectors_on_instance(prometheus_server, served):
    from prometheus_client import CollectorRegistry

    from infersight.collectors.engine.collector import EngineCollector
    from infersight.collectors.engine.targets import Target
    from infersight.collectors.exporter import serve
    from infersight.collectors.gateway.collector import build_registry
    from infersight.signals import engine

    engine_url = served.add("/metrics", VLLM)  # one vLLM engine, its instance is 127.0.0.1:PORT
    instance = f"127.0.0.1:{served.port}"
    # The router in front of it names that backend by URL, as production-stack does.
    router_text = ROUTER.replace("http://10.0.0.11:8000", f"http://{instance}")
    gateways = GatewayCollector([GatewayTarget(served.add("/router", router_text), "vllm-router")], log_changes=False)
    engines = EngineCollector([Target(engine_url, engine="vllm")])
    registry = CollectorRegistry()
    registry.register(engines)
    gateway_server, _ = serve(build_registry(gateways), "127.0.0.1:0")
    engine_server, _ = serve(registry, "127.0.0.1:0")
    try:
        prom = prometheus_server([f"127.0.0.1:{gateway_server.server_port}", f"127.0.0.1:{engine_server.server_port}"])
        # The router's open requests next to the engine's own queue, for the same instance.
        joined = prom.wait_for(f"sum by (instance) ({req.IN_FLIGHT.select()}) * on (instance) group_left "
                               f"sum by (instance) ({engine.REQUESTS_RUNNING.select()})")
        assert [r["metric"]["instance"] for r in joined] == [instance]
        healthy = prom.query(f"{gw.INSTANCE_STATE.select(state='healthy')} == 1 and on (instance) "
                             f"{engine.UP.select()} == 1")
        assert [r["metric"]["instance"] for r in healthy] == [instance]
        assert prom.query(f"{gw.SOURCE_UP.select()}")[0]["value"][1] == "1"
    finally:
        gateway_server.shutdown()
        engine_server.shutdown()
        engines.close()
        gateways.close()

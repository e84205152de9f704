"""``infersight proxy`` as a user runs it: a real process, its flags, its errors, its OTLP export."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

import openai
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from infersight import attributes as attr
from infersight.cli import main
from tests.instrumentation.engine_standin import EngineStandin
from tests.instrumentation.proxy_harness import LoopThread, serve


def test_help_names_the_flags(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["proxy", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--listen", "--upstream", "--ttft-timeout", "--idle-timeout", "--total-timeout"):
        assert flag in out


@pytest.mark.parametrize("argv, message", [
    (["--upstream", "engine:8000"], "expected an http(s) URL"),
    (["--upstream", "ftp://engine:21"], "expected an http(s) URL"),
    (["--listen", "8081"], "expected HOST:PORT"),
])
def test_bad_arguments_exit_2_with_a_reason(capsys, argv, message):
    assert main(["proxy", *argv]) == 2
    assert message in capsys.readouterr().err


def test_negative_timeout_is_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["proxy", "--idle-timeout", "-1"])
    assert exited.value.code == 2
    assert "must be >= 0" in capsys.readouterr().err


def test_busy_port_exits_1(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["proxy", "--listen", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


class OtlpSink:
    """Records OTLP/HTTP trace export requests (protobuf), as a receiver would get them."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.received = threading.Event()

    def app(self) -> web.Application:
        app = web.Application()

        async def traces(request: web.Request) -> web.Response:
            message = ExportTraceServiceRequest()
            message.ParseFromString(await request.read())
            self.requests.append(message)
            self.received.set()
            return web.Response(body=b"", content_type="application/x-protobuf")

        app.router.add_post("/v1/traces", traces)
        return app

    def spans(self) -> list:
        return [span for req in self.requests for rs in req.resource_spans for ss in rs.scope_spans
                for span in ss.spans]


def test_proxy_process_relays_and_exports_spans(tmp_path):
    loop = LoopThread()
    engine, sink = EngineStandin(), OtlpSink()
    runners = []
    try:
        engine_runner, engine_port = loop.call(serve(engine.app()))
        sink_runner, sink_port = loop.call(serve(sink.app()))
        runners += [engine_runner, sink_runner]
        config = tmp_path / "infersight.yaml"
        config.write_text(f"tracing:\n  otlp_endpoint: http://127.0.0.1:{sink_port}\n"
                          "  otlp_protocol: http/protobuf\n  schedule_delay_ms: 50\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        process = subprocess.Popen(
            [sys.executable, "-m", "infersight", "--config", str(config), "proxy", "--listen", "127.0.0.1:0",
             "--upstream", f"http://127.0.0.1:{engine_port}", "--provider", "vllm", "--pool", "canary"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            banner = process.stdout.readline()
            assert "listening on http://127.0.0.1:" in banner, process.stderr.read()
            url = banner.split("listening on ")[1].split(" ")[0]
            with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=10) as client:
                stream = client.chat.completions.create(model="standin-model", stream=True,
                                                        messages=[{"role": "user", "content": "hi"}])
                assert "".join(c.choices[0].delta.content or "" for c in stream) == "tok0 tok1 tok2 tok3 tok4 "
            assert sink.received.wait(10), "no OTLP export reached the sink"
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(10)
        assert code == 0, process.stderr.read()
        spans = {span.name: span for span in sink.spans()}
        request_span = spans["chat standin-model"]
        values = {kv.key: kv.value for kv in request_span.attributes}
        assert values[attr.REQUEST_OUTCOME].string_value == "success"
        assert values[attr.GEN_AI_PROVIDER_NAME].string_value == "vllm"
        assert values[attr.POOL].string_value == "canary"
        assert values[attr.TOKEN_COUNT].int_value == 5
        trace_id = request_span.trace_id.hex()
        assert engine.served[-1].headers["traceparent"].split("-")[1] == trace_id
    finally:
        for runner in runners:
            loop.call(runner.cleanup())
        loop.stop()

"""``infersight incident report``: files, content a person can act on, and Prometheus panels from a real server."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from infersight.cli import main
from infersight.signals import engine, gateway, gpu
from tests.conftest import free_port
from tests.pipelines import incident_data

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def store(clickhouse_server):
    _client, database, data, _ = incident_data.shared(clickhouse_server)
    return clickhouse_server.dsn(database, "reader"), data


def test_report_tells_the_story(store, tmp_path, capsys):
    dsn, data = store
    out = tmp_path / "report"
    code = main(["incident", "report", "--dsn", dsn, "--from", data.t0.isoformat() + "Z",
                 "--to", data.end.isoformat() + "Z", "--out", str(out), "--prometheus", "none"])
    assert code == 0
    printed = capsys.readouterr().out.split()
    expected = {"report.md", "report.html", "ttft_p95.png", "token_timelines.png", "neighbors_1.png", "retries.png"}
    assert {p.rsplit("/", 1)[-1] for p in printed} == expected
    for name in expected - {"report.md", "report.html"}:
        image = (out / name).read_bytes()
        assert image.startswith(PNG_MAGIC) and len(image) > 10_000, name

    markdown = (out / "report.md").read_text()
    summary = markdown.split("## ", 2)[1]
    stall = data.stall_at.strftime("%H:%M:%S")
    assert f"At {stall}.000 UTC on i-2, decoding stalled while a 32000-token prompt (no cached prefix)" in summary
    assert data.trace_id("long-prefill") in summary and "2 request(s) were decoding there" in summary
    assert "2 request(s) had an inter-token gap over 500 ms; the longest, 3000 ms, on i-2" in summary
    assert "1 request(s) were retried" in summary
    assert "gateway / pool canary: 20 requests, TTFT p95 300.0 ms, error rate 10.0%" in summary

    page = (out / "report.html").read_text()
    images = re.findall(r"<img src='([^']+)'", page)
    assert sorted(images) == sorted(expected - {"report.md", "report.html"})
    assert f"What i-2 was doing at {stall}" in page and "<script" not in page


def test_empty_window_and_unreachable_prometheus(store, tmp_path, capsys):
    dsn, data = store
    out = tmp_path / "quiet"
    start = data.end + dt.timedelta(minutes=1)
    code = main(["incident", "report", "--dsn", dsn, "--from", start.isoformat(), "--to",
                 (start + dt.timedelta(minutes=1)).isoformat(), "--out", str(out), "--prometheus",
                 f"http://127.0.0.1:{free_port()}"])
    assert code == 0
    markdown = (out / "report.md").read_text()
    assert "No request spans between" in markdown
    assert "was not reachable" in markdown and "--prometheus none" in markdown
    assert not list(out.glob("*.png"))


def test_prometheus_panels_from_a_real_server(store, tmp_path, prometheus_server, capsys):
    dsn, _ = store
    registry = CollectorRegistry()
    gateway.QUEUE_DEPTH.register(registry).labels(model="m", pool="stable", strategy="least_conn").set(42)
    engine.REQUESTS_WAITING.register(registry).labels(instance="i-2", engine="vllm", model="m", pool="stable",
                                                      node="n1", gpu="0", dp_rank="0", role="mixed").set(7)
    gpu.MEMORY_BANDWIDTH_UTILIZATION.register(registry).labels(node="n1", gpu="0", uuid="GPU-1", gpu_model="H100",
                                                               source="gpm").set(0.93)
    port = free_port()
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        prometheus = prometheus_server([f"127.0.0.1:{port}"])
        prometheus.wait_for(gpu.MEMORY_BANDWIDTH_UTILIZATION.select())
        prometheus.wait_for(engine.REQUESTS_WAITING.select())
        out = tmp_path / "with-prometheus"
        code = main(["incident", "report", "--dsn", dsn, "--since", "2m", "--out", str(out),
                     "--prometheus", prometheus.url])
    finally:
        server.shutdown()
    assert code == 0
    for name in ("gateway_queue.png", "instance_queue.png", "gpu_bw.png"):
        assert (out / name).read_bytes().startswith(PNG_MAGIC), name
    markdown = (out / "report.md").read_text()
    assert f"From Prometheus: {gpu.MEMORY_BANDWIDTH_UTILIZATION.select()}" in markdown


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: tmp / "a-file", "is a file, not a folder"),
    (lambda tmp: tmp / "a-file" / "report", "cannot create the folder"),
    (lambda tmp: "/sys/infersight-report", "cannot create the folder"),
])
def test_unusable_out_is_one_clear_line(store, tmp_path, capsys, make, message):
    dsn, data = store
    (tmp_path / "a-file").write_text("keep me")
    code = main(["incident", "report", "--dsn", dsn, "--from", data.t0.isoformat() + "Z",
                 "--to", data.end.isoformat() + "Z", "--out", str(make(tmp_path)), "--prometheus", "none"])
    out, err = capsys.readouterr()
    assert code == 1 and message in err and "Traceback" not in err and out == ""
    assert (tmp_path / "a-file").read_text() == "keep me"

"""``infersight incident report``: files, content a person can act on, and Prometheus panels from a real server."""

from __future__ import annotations

import datetime as dt
import json
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


def _report(dsn, data, out, *extra):
    return main(["incident", "report", "--dsn", dsn, "--from", data.t0.isoformat() + "Z",
                 "--to", data.end.isoformat() + "Z", "--out", str(out), "--prometheus", "none", *extra])


def test_report_tells_the_story(store, tmp_path, capsys):
    dsn, data = store
    out = tmp_path / "report"
    assert _report(dsn, data, out) == 0
    printed = capsys.readouterr().out
    stall = data.stall_at.strftime("%H:%M:%S")
    # the terminal gets the headline, the facts and what was skipped, then where the report is
    first = printed.splitlines()[0]
    assert first.startswith(f"Decoding stalled on i-2 at {stall}.000 UTC for 3.0 s: a 32,000-token prompt "
                            "(no cached prefix) in prefill on the same instance held up decoding")
    assert data.trace_id("long-prefill") in first
    assert "  Requests hit  2\n" in printed and "Duration      3.0 s" in printed
    assert "not in the report: the GPU and queue section: no Prometheus configured" in printed
    assert printed.rstrip().endswith(f"report: {out / 'report.html'} (and report.md, 5 charts)")

    expected = {"ttft_by_instance.png", "ttft_per_minute.png", "token_timelines.png", "neighbors_1.png",
                "attempts.png"}
    assert {p.name for p in out.glob("*.png")} == expected
    for name in expected:
        image = (out / name).read_bytes()
        assert image.startswith(PNG_MAGIC) and len(image) > 10_000, name

    markdown = (out / "report.md").read_text()
    head = markdown.split("## ", 1)[0]  # the first screen
    assert "| **Instance** | i-2 |" in head and f"| **Start** | {data.stall_at:%Y-%m-%d} {stall}.000 UTC |" in head
    assert "| **Duration** | 3.0 s |" in head and "| **Requests hit** | 2 |" in head
    # SLO impact from the incident: 3 requests slower than 1 s (long prefill, late arrival, retried) + 2 errors
    assert "| **SLO impact** | 5 of 65 requests (7.7%) missed TTFT 1,000 ms or failed" in head
    assert markdown.count("5 of 65 requests (7.7%)") == 1  # the SLO verdict is said once, not in a section again
    # the canary's failed attempts are named with where they failed, though its requests "succeeded"
    assert "Upstream attempts failed on i-3 from" in head and "2 of 20 upstream attempts failed" in head
    assert "in the canary pool" in head
    assert "Upstream attempts failed on i-2 at" in head and "(timeout)" in head
    assert "Unset" not in markdown and "00:00:00 " not in markdown
    # the pools side by side show how evenly each spread its requests, not only its own percentiles
    pools = markdown.split("## How did the pools compare?", 1)[1].split("## ", 1)[0]
    assert ("| pool | strategy | instances | requests | busiest_instance_share | ttft_p95_ms | ttft_p99_ms "
            "| slowest_instance_ttft_p99_ms |") in pools

    page = (out / "report.html").read_text()
    images = re.findall(r"<img src='([^']+)'", page)
    assert sorted(images) == sorted(expected)
    assert f"What else ran on i-2 during the stall at {stall}.000 UTC?" in page and "<script" not in page
    assert "href=" not in page  # no Grafana configured: no links


def test_trace_ids_link_to_grafana_when_configured(store, tmp_path, capsys):
    import urllib.parse

    dsn, data = store
    out = tmp_path / "linked"
    assert _report(dsn, data, out, "--grafana", "http://grafana.example:3000/") == 0
    page = (out / "report.html").read_text()
    links = re.findall(r"<a href='([^']+)'>([0-9a-f]{32})</a>", page)
    assert data.trace_id("long-prefill") in {trace for _, trace in links}
    url, trace = next(link for link in links if link[1] == data.trace_id("long-prefill"))
    assert url.startswith("http://grafana.example:3000/explore?schemaVersion=1&amp;orgId=1&amp;panes=")
    panes = json.loads(urllib.parse.unquote(url.split("panes=", 1)[1]))
    query = panes["trace"]["queries"][0]
    assert query["queryType"] == "traces" and f"TraceId = '{trace}'" in query["rawSql"]
    assert query["datasource"]["uid"] == "infersight-clickhouse" and "${" not in json.dumps(panes)
    assert f"[{trace}](http://grafana.example:3000/explore" in (out / "report.md").read_text()


def test_report_in_a_browser_loads_every_image(store, tmp_path, capsys):
    """Rendered by headless Chromium: every image decodes, nothing overflows the page's width."""
    from tests.pipelines import browser

    dsn, data = store
    out = tmp_path / "browser"
    assert _report(dsn, data, out, "--grafana", "http://grafana.example:3000") == 0
    loaded = browser.load(out / "report.html")
    assert loaded.images == len(list(out.glob("*.png"))) - 1 == 5  # minus the screenshot itself
    assert loaded.broken == [], loaded.broken
    assert loaded.scroll_width <= 1200, f"the page is {loaded.scroll_width}px wide; see {loaded.screenshot}"
    assert loaded.screenshot.read_bytes().startswith(PNG_MAGIC)
    assert "Decoding stalled on i-2" in loaded.dom


def test_a_broken_image_is_caught_by_the_browser_check(store, tmp_path, capsys):
    from tests.pipelines import browser

    dsn, data = store
    out = tmp_path / "broken"
    assert _report(dsn, data, out) == 0
    (out / "attempts.png").write_bytes(b"not a png")
    (out / "token_timelines.png").unlink()
    assert sorted(browser.load(out / "report.html").broken) == ["attempts.png", "token_timelines.png"]


def test_a_stall_without_its_timeline_is_named(clickhouse_server, clickhouse_schema, tmp_path, capsys):
    """A stall known only from the span summary (timeline not kept) still leads the report, with a note."""
    import datetime as dt

    from infersight import attributes as attr
    from tests.pipelines.span_rows import insert_spans, span_row

    client = clickhouse_server.client(clickhouse_schema)
    start = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=10)
    trace = "ab" * 16
    insert_spans(client, clickhouse_schema, [span_row(
        start, trace, "cd" * 8, "chat m", 2500.0,
        attributes={attr.REQUEST_OUTCOME: "success", attr.INSTANCE: "10.0.0.9:8000", attr.TTFT_MS: 80.0,
                    attr.TOKEN_GAP_MAX_MS: 1800.0, attr.TOKEN_STALL_OFFSET_MS: 300.0,
                    attr.GEN_AI_USAGE_OUTPUT_TOKENS: 40})])
    out = tmp_path / "unkept"
    code = main(["incident", "report", "--dsn", clickhouse_server.dsn(clickhouse_schema, "reader"), "--since", "30m",
                 "--out", str(out), "--prometheus", "none"])
    printed = capsys.readouterr().out
    assert code == 0 and printed.startswith("Decoding stalled on 10.0.0.9:8000 at ")
    assert f"not in the report: trace {trace} stalled 1,800 ms on 10.0.0.9:8000" in printed
    assert "its token timeline was not kept" in (out / "report.md").read_text()


def test_empty_window_and_unreachable_prometheus(store, tmp_path, capsys):
    dsn, data = store
    out = tmp_path / "quiet"
    start = data.end + dt.timedelta(minutes=1)
    code = main(["incident", "report", "--dsn", dsn, "--from", start.isoformat(), "--to",
                 (start + dt.timedelta(minutes=1)).isoformat(), "--out", str(out), "--prometheus",
                 f"http://127.0.0.1:{free_port()}"])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("No request spans between") and "Prometheus at http://127.0.0.1:" in printed
    markdown = (out / "report.md").read_text()
    assert "No request spans between" in markdown
    assert "did not answer" in markdown and "--prometheus none" in markdown
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
    for name in ("gateway_queue.png", "instance_queue.png", "gpu_bandwidth.png"):
        assert (out / name).read_bytes().startswith(PNG_MAGIC), name
    markdown = (out / "report.md").read_text()
    assert f"From Prometheus: max by (node, gpu) ({gpu.MEMORY_BANDWIDTH_UTILIZATION.select()})" in markdown
    assert "## Was GPU memory bandwidth saturated?" in markdown and "Not in this report" not in markdown


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


def test_report_summary_as_json_for_scripts(store, tmp_path, capsys):
    dsn, data = store
    out = tmp_path / "json"
    assert _report(dsn, data, out, "--format", "json") == 0
    body = json.loads(capsys.readouterr().out)
    assert body["facts"]["Instance"] == "i-2" and body["facts"]["Duration"] == "3.0 s"
    assert body["headline"].startswith("Decoding stalled on i-2") and len(body["also"]) == 2
    assert any(line.startswith("the GPU and queue section") for line in body["skipped"])
    assert {p.rsplit("/", 1)[-1] for p in body["files"]} >= {"report.html", "report.md", "attempts.png"}
    assert _report(dsn, data, out, "--grafana", "grafana:3000") == 1
    assert "--grafana 'grafana:3000' is not a URL" in capsys.readouterr().err

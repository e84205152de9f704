"""``infersight incident report``: one folder with report.html, report.md and the PNGs they show.

It is written for the person who has two minutes: the first section says what happened in plain
words (which instance stalled when, what was running there, how many requests suffered), and each
later section shows the evidence behind it, as plots and as the query results.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infersight.pipelines.queries import library, plots
from infersight.pipelines.queries.window import Window

MAX_STALL_SECTIONS = 3


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)  # paragraphs (plain text)
    image: str | None = None  # file name in the report folder
    table: list[dict[str, Any]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)


def write_report(client, db: str, window: Window, out: str | Path, min_gap_ms: float = 500.0, worst: int = 5,
                 service: str = "", prometheus_url: str | None = None) -> list[Path]:
    """Query, plot and write the report; returns the files written."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    start, end = window.start, window.end

    pools = library.compare_pools(client, db, start, end, service=service)
    stalls = library.window_stalls(client, db, start, end, min_gap_ms=min_gap_ms, service=service)
    worst_rows = [r for r in library.slowest(client, db, start, end, by="gap", limit=worst, service=service)
                  if (r["max_gap_ms"] or 0) > min_gap_ms]
    slowest = library.slowest(client, db, start, end, by="ttft", limit=10, service=service)
    percentiles = library.percentiles(client, db, start, end, by="instance", service=service)
    retries = library.retries(client, db, start, end)

    stall_points = _stall_points(worst_rows)
    neighbor_sets = [(instance, at, library.neighbors(client, db, instance, during, service=service))
                     for instance, at, during in stall_points[:MAX_STALL_SECTIONS]]
    sections = [_summary(window, pools, stalls, neighbor_sets, retries, min_gap_ms)]

    if percentiles:
        plots.ttft_per_instance(percentiles, [at for _, at, _ in stall_points], folder / "ttft_p95.png")
        sections.append(Section("TTFT p95 per instance", ["Per minute, from the llm_requests_1m rollup."],
                                "ttft_p95.png", slowest, ["trace_id", "started", "instance", "pool", "outcome",
                                                          "ttft_ms", "e2e_ms", "input_tokens"]))
    timelines = [(r, library.token_timeline(client, db, r["trace_id"])) for r in worst_rows]
    timelines = [(r, [t for t in tokens if t["span_id"] == tokens[0]["span_id"]]) for r, tokens in timelines if tokens]
    if timelines:
        plots.token_timelines(timelines, folder / "token_timelines.png")
        sections.append(Section("Token timelines of the worst requests",
                                [f"Requests whose longest inter-token gap exceeded {min_gap_ms:g} ms, worst first."],
                                "token_timelines.png", stalls,
                                ["minute", "instance", "requests", "max_gap_ms", "first_stall_at", "example_traces"]))
    for number, (instance, at, rows) in enumerate(neighbor_sets, start=1):
        if rows:
            name = f"neighbors_{number}.png"
            plots.neighbors_gantt(instance, at, rows, folder / name)
            sections.append(Section(f"What {instance} was doing at {at:%H:%M:%S}",
                                    ["Every request on the instance when the gap began: its phase, prompt length "
                                     "and whether its prefix was cached."], name, rows,
                                    ["trace_id", "phase", "running_for_ms", "prompt_tokens", "cached_tokens",
                                     "output_tokens", "ttft_ms", "e2e_ms"]))
    if retries:
        plots.retry_chains(retries, folder / "retries.png")
        sections.append(Section("Retries", [f"{len({r['trace_id'] for r in retries})} requests were retried."],
                                "retries.png", retries, ["trace_id", "attempt", "instance", "started", "duration_ms",
                                                         "status", "backoff_ms", "gap_ms"]))
    sections.append(Section("Pools side by side", ["Error rate counts errors, timeouts and rejections."],
                            None, pools, ["service", "pool", "requests", "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms",
                                          "tokens_per_s", "error_rate"]))
    if prometheus_url:
        sections += _prometheus_sections(prometheus_url, window, [at for _, at, _ in stall_points], folder)

    written = [folder / "report.md", folder / "report.html"]
    written[0].write_text(_markdown(window, sections))
    written[1].write_text(_html(window, sections))
    return written + sorted(folder.glob("*.png"))


def _stall_points(worst_rows: list[dict[str, Any]]) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """Distinct (instance, stall start, middle of the gap) of the worst requests' longest gaps.

    Neighbours are looked up in the middle of the gap, not at its start: the start is the last token
    before the stall, often a moment before the culprit (a long prompt going into prefill) arrived.
    From the request span's own summary, so it works for requests whose timeline was not kept.
    """
    points: list[tuple[str, dt.datetime, dt.datetime]] = []
    seen: set[tuple[str, dt.datetime]] = set()
    for row in worst_rows:
        if row["stall_at"] is None or not row["instance"]:
            continue
        during = row["stall_at"] + dt.timedelta(milliseconds=(row["max_gap_ms"] or 0) / 2)
        key = (row["instance"], during.replace(microsecond=0))
        if key not in seen:
            seen.add(key)
            points.append((row["instance"], row["stall_at"], during))
    return points


def _summary(window: Window, pools, stalls, neighbor_sets, retries, min_gap_ms: float) -> Section:
    lines = []
    requests = sum(p["requests"] for p in pools)
    if not requests:
        return Section("What happened", [f"No request spans between {window}. Check the window and the DSN."])
    for instance, at, rows in neighbor_sets:
        prefill = [r for r in rows if r["phase"] == "prefill"]
        decoding = [r for r in rows if r["phase"] == "decode"]
        line = f"At {at:%H:%M:%S.%f}"[:-3] + f" UTC on {instance}, decoding stalled"
        if prefill:
            biggest = max(prefill, key=lambda r: r["prompt_tokens"])
            cached = "no cached prefix" if not biggest["prefix_cached"] else f"{biggest['cached_tokens']} cached"
            line += (f" while a {biggest['prompt_tokens']}-token prompt ({cached}) was in prefill "
                     f"(trace {biggest['trace_id']})")
        line += f"; {len(decoding)} request(s) were decoding there and {len(prefill)} in prefill."
        lines.append(line)
    stalled = sum(s["requests"] for s in stalls)
    if stalls:
        worst = max(stalls, key=lambda s: s["max_gap_ms"])
        lines.append(f"{stalled} request(s) had an inter-token gap over {min_gap_ms:g} ms; the longest, "
                     f"{worst['max_gap_ms']:.0f} ms, on {worst['instance']} in the minute {worst['minute']:%H:%M}.")
    else:
        lines.append(f"No request had an inter-token gap over {min_gap_ms:g} ms.")
    chains = len({r["trace_id"] for r in retries})
    if chains:
        lines.append(f"{chains} request(s) were retried on another attempt.")
    for pool in pools:
        lines.append(f"{pool['service']} / pool {pool['pool'] or '(none)'}: {pool['requests']} requests, "
                     f"TTFT p95 {pool['ttft_p95_ms']} ms, error rate {pool['error_rate']:.1%}.")
    return Section("What happened", lines)


def _prometheus_sections(url: str, window: Window, stalls, folder: Path) -> list[Section]:
    from infersight.signals import engine, gateway, gpu

    panels = (("Gateway queue depth", "requests", gateway.QUEUE_DEPTH.select(), "gateway_queue.png"),
              ("Instance queue depth", "requests", engine.REQUESTS_WAITING.select(), "instance_queue.png"),
              ("GPU memory bandwidth utilization", "ratio", gpu.MEMORY_BANDWIDTH_UTILIZATION.select(), "gpu_bw.png"))
    sections = []
    for title, unit, promql, name in panels:
        try:
            series = _query_range(url, promql, window)
        except OSError as exc:
            return [Section("Prometheus", [f"Prometheus at {url} was not reachable ({exc}); its panels are "
                                           "missing. Pass --prometheus URL, or --prometheus none to skip."])]
        if series:
            plots.prometheus_series(title, unit, series, stalls, folder / name, (window.start, window.end))
            sections.append(Section(title, [f"From Prometheus: {promql}"], name))
        else:
            sections.append(Section(title, [f"Prometheus has no samples of {promql} in the window."]))
    return sections


def _query_range(url: str, promql: str, window: Window) -> list[tuple[str, list[tuple[dt.datetime, float]]]]:
    step = max(window.seconds / 500, 1.0)
    start = window.start.replace(tzinfo=dt.UTC).timestamp()
    end = window.end.replace(tzinfo=dt.UTC).timestamp()
    query = urllib.parse.urlencode({"query": promql, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{query}", timeout=10) as resp:
        body = json.load(resp)
    result = []
    for item in body.get("data", {}).get("result", []):
        labels = ",".join(f"{k}={v}" for k, v in sorted(item["metric"].items()) if k not in ("__name__", "job"))
        points = [(dt.datetime.fromtimestamp(float(t), dt.UTC).replace(tzinfo=None), float(v))
                  for t, v in item["values"]]
        result.append((labels or promql, points))
    return result


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _markdown(window: Window, sections: list[Section]) -> str:
    out = [f"# Incident report: {window}", ""]
    for section in sections:
        out += [f"## {section.title}", ""]
        if section.title == "What happened":
            out += [f"- {line}" for line in section.text] + [""]
        else:
            out += [f"{line}\n" for line in section.text]
        if section.image:
            out += [f"![{section.title}]({section.image})", ""]
        if section.table:
            out.append("| " + " | ".join(section.columns) + " |")
            out.append("|" + "---|" * len(section.columns))
            for row in section.table[:25]:
                out.append("| " + " | ".join(_cell(row.get(c)).replace("|", "\\|") for c in section.columns) + " |")
            out.append("")
    return "\n".join(out)


STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}td,th{border:1px solid #ddd;padding:.2em .5em}
th{background:#f4f4f4}img{max-width:100%}.summary li{margin:.3em 0}"""


def _html(window: Window, sections: list[Section]) -> str:
    esc = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>Incident report: {esc(str(window))}</title>",
           f"<style>{STYLE}</style></head><body><h1>Incident report: {esc(str(window))}</h1>"]
    for section in sections:
        out.append(f"<h2>{esc(section.title)}</h2>")
        if section.title == "What happened":
            out.append("<ul class='summary'>" + "".join(f"<li>{esc(line)}</li>" for line in section.text) + "</ul>")
        else:
            out += [f"<p>{esc(line)}</p>" for line in section.text]
        if section.image:
            out.append(f"<img src='{esc(section.image)}' alt='{esc(section.title)}'>")
        if section.table:
            out.append("<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in section.columns) + "</tr>")
            for row in section.table[:25]:
                out.append("<tr>" + "".join(f"<td>{esc(_cell(row.get(c)))}</td>" for c in section.columns) + "</tr>")
            out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)

"""``infersight incident report``: one folder with report.html, report.md and the PNGs they show.

Written for the person who has two minutes. The first screen says what happened, where and when:
cause, instance, start, duration, requests hit and SLO impact (:mod:`findings`), the other findings
one line each, and what the report could not show and why. Every later section asks one question
in its heading and answers it with one chart and the rows behind it.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infersight.pipelines.queries import findings, library, plots
from infersight.pipelines.queries.findings import Headline, Slo, Stall, clock
from infersight.pipelines.queries.window import Window
from infersight.pipelines.schema.ddl import DEFAULT_TABLES, Tables

MAX_STALL_SECTIONS = 3
STALL_ROWS_SHOWN = 20  # instance-minutes in the stalls table: the longest gaps
MIN_MINUTES_FOR_TREND = 3  # fewer minutes make a per-minute chart of single dots: the bars say it better
TABLE_ROWS = 25
LINKED_COLUMNS = ("trace_id", "example_traces", "culprit_trace")


@dataclass(frozen=True)
class Settings:
    """What the report judges against and links to, from the config."""

    slo: Slo
    grafana_url: str | None = None
    grafana_datasource_uid: str | None = None
    gateway_queue_limit: float | None = None
    instance_queue_limit: float | None = None
    bandwidth_saturation: float | None = None
    tables: Tables = DEFAULT_TABLES  # clickhouse.tables: where the queries read

    @classmethod
    def from_config(cls, config, grafana_url: str | None = None) -> Settings:
        from infersight.thresholds import ThresholdsError, thresholds_from_config

        slo = Slo(config.slo.ttft_seconds * 1000, config.slo.ttft_objective, config.slo.ttft_p95_seconds * 1000)
        try:
            instance_queue = float(thresholds_from_config(config).instance_queue_limit)
        except ThresholdsError:  # a capacity model the alerts refuse: the line is left out, not invented
            instance_queue = None
        return cls(slo, grafana_url or config.grafana.url, config.grafana.clickhouse_datasource_uid,
                   config.thresholds.gateway_queue_depth, instance_queue, config.thresholds.bandwidth_saturation,
                   Tables.from_config(config))


@dataclass
class Section:
    title: str  # the question the section answers
    text: list[str] = field(default_factory=list)  # paragraphs (plain text)
    image: str | None = None  # file name in the report folder
    table: list[dict[str, Any]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)


@dataclass
class Report:
    window: Window
    headline: Headline
    skipped: list[str]  # what the report could not show, and why
    files: list[Path]  # report.html, report.md and the charts, as written now

    @property
    def html(self) -> Path:
        return self.files[1]

    def __iter__(self) -> Iterator[Path]:
        return iter(self.files)


def write_report(client, db: str, window: Window, out: str | Path, min_gap_ms: float = 500.0, worst: int = 5,
                 service: str = "", prometheus_url: str | None = None, settings: Settings | None = None,
                 no_prometheus_because: str | None = None) -> Report:
    """Query, chart and write the report; returns the headline, the skipped parts and the files written.

    ``no_prometheus_because``: why a caller withholds Prometheus on purpose (the demo's runs on its
    compressed clock), said instead of "no Prometheus configured".
    """
    settings = settings or Settings(Slo(1000.0, 0.99, 1000.0))
    t = settings.tables
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):  # a previous report's charts must not pass for this one's
        old.unlink()
    start, end = window.start, window.end
    charts: list[Path] = []
    skipped: list[str] = []

    impact = library.slo_impact(client, db, start, end, settings.slo.ttft_ms, service=service, tables=t)
    # Latency charts and the pools table as the entry service saw the requests: the engines behind a
    # traced gateway see the same requests again, and two lines per instance say nothing more.
    view = service or impact["service"]
    pools = library.compare_pools(client, db, start, end, service=view, tables=t)
    stall_rows = library.window_stalls(client, db, start, end, min_gap_ms=min_gap_ms, service=service, tables=t)
    worst_rows = [r for r in library.slowest(client, db, start, end, by="gap", limit=worst, service=service,
                                             tables=t)
                  if (r["max_gap_ms"] or 0) > min_gap_ms]
    slowest = library.slowest(client, db, start, end, by="ttft", limit=10, service=service, tables=t)
    by_instance = library.window_percentiles(client, db, start, end, service=view, tables=t)
    per_minute = library.percentiles(client, db, start, end, by="instance", service=view, tables=t)
    retries = library.retries(client, db, start, end, tables=t)
    attempts = library.attempt_failures(client, db, start, end, tables=t)
    instance_pool = library.instance_pools(client, db, start, end, tables=t)

    stalls = _stalls(client, db, worst_rows, stall_rows, service, settings.tables)
    if len(stalls) > MAX_STALL_SECTIONS:
        skipped.append(f"{len(stalls) - MAX_STALL_SECTIONS} more stalled instance(s) without their own section; "
                       "see the stalls table at the end")
    head = findings.headline(_window_text(window), impact, settings.slo, stalls, attempts, instance_pool, retries,
                             min_gap_ms)
    marks = [(s.at, s.gap_ms) for s in stalls]
    sections: list[Section] = []

    if by_instance:
        charts.append(plots.ttft_by_instance(by_instance, settings.slo.ttft_p95_ms, folder / "ttft_by_instance.png"))
        # The SLO's verdict is in the headline: this section says what only it shows, per instance.
        over = sum(1 for r in by_instance if (r["ttft_p95_ms"] or 0) > settings.slo.ttft_p95_ms)
        sections.append(Section("Was time to first token within target?",
                                [f"TTFT per instance over the whole window as {view} saw it, from the "
                                 f"{settings.tables.requests_1m} rollup: {over} of {len(by_instance)} instances "
                                 f"over the SLO's p95 target of {settings.slo.ttft_p95_ms:,.0f} ms."],
                                charts[-1].name, by_instance,
                                ["service", "instance", "requests", "errors", "ttft_p50_ms", "ttft_p95_ms",
                                 "ttft_p99_ms"]))
    if len({r["minute"] for r in per_minute}) >= MIN_MINUTES_FOR_TREND:
        charts.append(plots.ttft_per_minute(per_minute, settings.slo.ttft_p95_ms, marks, (start, end),
                                            folder / "ttft_per_minute.png"))
        sections.append(Section("When did time to first token leave its target?",
                                [f"p95 per minute and instance as {view} saw it; red bands are token stalls."],
                                charts[-1].name))

    timelines = [(r, library.token_timeline(client, db, r["trace_id"], tables=t)) for r in worst_rows]
    for row, tokens in timelines:
        if not tokens:
            skipped.append(f"trace {row['trace_id']} stalled {row['max_gap_ms']:,.0f} ms on {row['instance']} at "
                           f"{clock(row['stall_at'])}, but its token timeline was not kept (tail sampling); the gap "
                           "comes from its span summary")
    kept = [(r, [t for t in tokens if t["span_id"] == tokens[0]["span_id"]]) for r, tokens in timelines if tokens]
    if kept:
        charts.append(plots.token_timelines(kept, folder / "token_timelines.png"))
        sections.append(Section("Where did the streams stop?",
                                [f"The requests with the longest inter-token gaps over {min_gap_ms:g} ms, worst "
                                 "first: tokens received over time, the longest gap in red."], charts[-1].name))
    for number, stall in enumerate(stalls[:MAX_STALL_SECTIONS], start=1):
        title = f"What else ran on {stall.instance} during the stall at {clock(stall.at)}?"
        if not stall.neighbors:
            sections.append(Section(title, ["No request span covers that moment on the instance."]))
            continue
        charts.append(plots.neighbors_gantt(stall.instance, (stall.at, stall.gap_ms), stall.neighbors,
                                            folder / f"neighbors_{number}.png"))
        why = findings.sentence_case(findings.stall_finding(stall).cause)
        sections.append(Section(title, [f"{why}. Bars: each request's queue, prefill and decode; the red band is "
                                        "the gap."], charts[-1].name,
                                stall.neighbors, ["trace_id", "phase", "running_for_ms", "prompt_tokens",
                                                  "cached_tokens", "output_tokens", "ttft_ms", "e2e_ms"]))

    sections.append(_attempts_section(attempts, instance_pool, retries, folder, charts))
    sections += _prometheus_sections(prometheus_url, window, marks, settings, folder, charts, skipped,
                                     no_prometheus_because)
    sections.append(Section("Which requests were slowest to their first token?", [], None, slowest,
                            ["trace_id", "started", "service", "instance", "pool", "outcome", "ttft_ms", "e2e_ms",
                             "max_gap_ms", "input_tokens"]))
    sections.append(Section("How did the pools compare?",
                            [f"As the service {view or 'at the entry'} saw the requests, per pool and balancing "
                             "strategy (a pool whose strategy changed has a row per strategy).",
                             "A hot spot hides in a pool's own percentiles: busiest_instance_share is the share of "
                             "the pool's requests its busiest instance served (1 / instances when even), "
                             "slowest_instance_ttft_p99_ms the p99 first-token time of its slowest instance.",
                             "Request error rate counts errors, timeouts and rejections of the requests as they "
                             "ended; a request retried to success counts as a success, so failed attempts are "
                             "counted apart."], None, _with_failed_attempts(pools, attempts, instance_pool),
                            ["pool", "strategy", "instances", "requests", "busiest_instance_share", "ttft_p95_ms",
                             "ttft_p99_ms", "slowest_instance_ttft_p99_ms", "tokens_per_s", "error_rate",
                             "failed_attempts"]))
    if stall_rows:
        shown, text = stall_rows, []
        if len(stall_rows) > STALL_ROWS_SHOWN:  # a busy fleet stalls somewhere every minute: the worst, in time order
            shown = sorted(longest_stalls(stall_rows, STALL_ROWS_SHOWN), key=lambda r: (r["minute"], r["instance"]))
            minutes = [r["minute"] for r in stall_rows]
            text = [f"{len(stall_rows):,} instance-minutes had a gap over {min_gap_ms:g} ms, on "
                    f"{len({r['instance'] for r in stall_rows})} instances from {min(minutes):%H:%M} to "
                    f"{max(minutes):%H:%M} UTC ({sum(r['requests'] for r in stall_rows):,} requests); the "
                    f"{STALL_ROWS_SHOWN} with the longest gaps are below. `infersight traces stalls` over this "
                    "window lists them all."]
        sections.append(Section(f"Which instances stalled, minute by minute (gaps over {min_gap_ms:g} ms)?", text,
                                None, shown, ["minute", "instance", "requests", "max_gap_ms", "mean_gap_ms",
                                              "first_stall_at", "example_traces"]))

    for section in sections:
        if section.columns and not section.table:
            section.text.append("No rows in this window.")
    links = _links(settings, db, window, [*slowest, *stall_rows, *retries, *(n for s in stalls for n in s.neighbors)])
    written = [folder / "report.md", folder / "report.html"]
    written[0].write_text(_markdown(window, head, skipped, sections, links))
    written[1].write_text(_html(window, head, skipped, sections, links))
    return Report(window, head, skipped, written + charts)



def longest_stalls(stall_rows: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The ``count`` instance-minutes of :func:`library.window_stalls` with the longest gaps, longest first."""
    return sorted(stall_rows, key=lambda r: (-(r["max_gap_ms"] or 0), r["minute"], r["instance"]))[:count]


def _stalls(client, db: str, worst_rows, stall_rows, service: str, tables: Tables) -> list[Stall]:
    """One stall per instance, at its worst request's longest gap, with what ran there mid-gap.

    Neighbours are looked up in the middle of the gap, not at its start: the start is the last token
    before the stall, often a moment before the culprit (a long prompt going into prefill) arrived.
    From the request span's own summary, so it works for requests whose timeline was not kept.
    """
    stalled_requests: dict[str, int] = {}
    for row in stall_rows:
        stalled_requests[row["instance"]] = stalled_requests.get(row["instance"], 0) + row["requests"]
    stalls: list[Stall] = []
    for row in worst_rows:
        if row["stall_at"] is None or not row["instance"] or any(s.instance == row["instance"] for s in stalls):
            continue
        gap = row["max_gap_ms"] or 0.0
        during = row["stall_at"] + dt.timedelta(milliseconds=gap / 2)
        neighbors = (library.neighbors(client, db, row["instance"], during, service=service, tables=tables)
                     if len(stalls) < MAX_STALL_SECTIONS else [])
        stalls.append(Stall(row["instance"], row["stall_at"], gap, neighbors,
                            stalled_requests.get(row["instance"], 1)))
    return stalls


def _attempts_section(attempts, instance_pool, retries, folder: Path, charts: list[Path]) -> Section:
    title = "Where did upstream attempts fail?"
    failed = sum(r["failed_attempts"] for r in attempts)
    if not attempts:
        return Section(title, ["No upstream attempt spans in the window (the gateway is not traced, or no traffic)."])
    if not failed:
        return Section(title, [f"None of {sum(r['attempts'] for r in attempts):,} upstream attempts failed."])
    charts.append(plots.attempts_by_instance(attempts, instance_pool, folder / "attempts.png"))
    chains = len({r["trace_id"] for r in retries})
    text = [f"{failed:,} of {sum(r['attempts'] for r in attempts):,} upstream attempts failed; "
            f"{chains} request(s) were tried more than once (their attempts are listed below)."]
    return Section(title, text, charts[-1].name, retries,
                   ["trace_id", "attempt", "instance", "started", "duration_ms", "status", "error", "backoff_ms",
                    "gap_ms"])


def _with_failed_attempts(pools, attempts, instance_pool) -> list[dict[str, Any]]:
    failed: dict[str, int] = {}
    for row in attempts:
        pool = instance_pool.get(row["instance"], "")
        failed[pool] = failed.get(pool, 0) + row["failed_attempts"]
    return [p | {"failed_attempts": failed.get(p["pool"], 0)} for p in pools]


def _prometheus_sections(url: str | None, window: Window, marks, settings: Settings, folder: Path,
                         charts: list[Path], skipped: list[str], because: str | None = None) -> list[Section]:
    from infersight.pipelines.queries import prometheus

    title = "Were the GPUs or the queues the bottleneck?"
    if not url:
        note = (f"the GPU and queue section: {because}" if because else
                "the GPU and queue section: no Prometheus configured (set prometheus.url or pass --prometheus URL)")
        skipped.append(note)
        return [Section(title, [f"Skipped {note}."])]
    sections = []
    for panel in prometheus.panels(settings.gateway_queue_limit, settings.instance_queue_limit,
                                   settings.bandwidth_saturation):
        try:
            series = prometheus.query_range(url, panel.promql, window)
        except prometheus.PrometheusUnavailable as exc:
            note = f"the GPU and queue section: Prometheus at {url} did not answer ({exc})"
            skipped.append(note)
            return [Section(title, [f"Skipped {note}. Pass --prometheus URL, or --prometheus none to skip it."])]
        if series:
            charts.append(plots.prometheus_series(panel.question, panel.ylabel, series, marks, folder / panel.file,
                                                  (window.start, window.end), panel.limit, panel.ratio))
            sections.append(Section(panel.question, [f"From Prometheus: {panel.promql}"], charts[-1].name))
        else:
            skipped.append(f"{panel.question.split('?')[0]}?: Prometheus has no samples of {panel.promql} "
                           "in the window")
    if not sections:
        return [Section(title, [f"Prometheus at {url} has none of the queue or GPU series for this window."])]
    sections[0].text.insert(0, "From Prometheus over the same window; red bands are token stalls.")
    return sections


def _links(settings: Settings, db: str, window: Window, rows: list[dict[str, Any]]) -> dict[str, str]:
    """{trace id: Grafana trace-view URL} for every trace id the report shows, when Grafana is configured."""
    if not settings.grafana_url:
        return {}
    from infersight.pipelines.queries.links import trace_url

    ids: set[str] = set()
    for row in rows:
        for column in LINKED_COLUMNS:
            value = row.get(column)
            ids.update(value if isinstance(value, list) else [value] if value else [])
    around = (window.start - dt.timedelta(minutes=5), window.end + dt.timedelta(minutes=5))
    urls = {i: trace_url(settings.grafana_url, db, i, around, settings.grafana_datasource_uid, settings.tables)
            for i in ids}
    return {i: u for i, u in urls.items() if u}


# -- rendering -------------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        return value.strftime("%H:%M:%S.%f")[:-3]
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _format(column: str, value: Any) -> str:
    if column.endswith("_rate") and isinstance(value, float) and value == value:
        return f"{value:.1%}"
    return _cell(value)


def _header(section: Section, column: str) -> str:
    """Column name, with (UTC) on clock-time columns."""
    if any(isinstance(row.get(column), dt.datetime) for row in section.table[:1]):
        return f"{column} (UTC)"
    return column


def _window_text(window: Window) -> str:
    minutes = window.seconds / 60
    length = f"{minutes:,.0f} min" if minutes >= 2 else f"{window.seconds:,.0f} s"
    same_day = window.start.date() == window.end.date()
    end = window.end.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")
    return f"{window.start:%Y-%m-%d %H:%M:%S} – {end} UTC ({length})"


def _markdown(window: Window, head: Headline, skipped: list[str], sections: list[Section],
              links: dict[str, str]) -> str:
    def cell(column: str, value: Any) -> str:
        text = _format(column, value).replace("|", "\\|")
        if column in LINKED_COLUMNS:
            for trace, url in links.items():
                text = text.replace(trace, f"[{trace}]({url})")
        return text

    out = [f"# Incident report: {_window_text(window)}", "", f"**{head.sentence}**", ""]
    out += ["| | |", "|---|---|"] + [f"| **{k}** | {v.replace('|', '/')} |" for k, v in head.facts] + [""]
    if head.also:
        out += ["Also in this window:", ""] + [f"- {line}" for line in head.also] + [""]
    if skipped:
        out += ["Not in this report:", ""] + [f"- {line}" for line in skipped] + [""]
    for section in sections:
        out += [f"## {section.title}", ""] + [f"{line}\n" for line in section.text]
        if section.image:
            out += [f"![{section.title}]({section.image})", ""]
        if section.table:
            out.append("| " + " | ".join(_header(section, c) for c in section.columns) + " |")
            out.append("|" + "---|" * len(section.columns))
            for row in section.table[:TABLE_ROWS]:
                out.append("| " + " | ".join(cell(c, row.get(c)) for c in section.columns) + " |")
            if len(section.table) > TABLE_ROWS:
                out.append(f"\n{len(section.table) - TABLE_ROWS} more rows not shown.")
            out.append("")
    out.append("All times are UTC.")
    return "\n".join(out) + "\n"


STYLE = """body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1140px;margin:1.5em auto;
padding:0 1em;color:#1d1d1f;line-height:1.4}
h1{font-size:1.35em;margin:.2em 0 .6em}h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.8em}
.headline{border:2px solid #d62728;border-radius:6px;padding:.8em 1.1em;background:#fff7f7}
.headline.quiet{border-color:#59a14f;background:#f6fbf5}
.headline p.sentence{font-size:1.1em;font-weight:600;margin:.1em 0 .7em}
.facts{border-collapse:collapse;font-size:.95em}.facts th{text-align:left;padding:.15em 1.2em .15em 0;
vertical-align:top;white-space:nowrap;background:none;border:none}.facts td{padding:.15em 0;border:none}
.notes{font-size:.9em;color:#444}.notes li{margin:.2em 0}
table.rows{border-collapse:collapse;font-size:.82em;margin:.6em 0}
table.rows td,table.rows th{border:1px solid #ddd;padding:.2em .5em;white-space:nowrap}
table.rows th{background:#f4f4f4;white-space:normal;vertical-align:bottom}
table.rows td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto;display:block;margin:.5em 0}footer{margin-top:2em;color:#666;font-size:.85em}"""


def _html(window: Window, head: Headline, skipped: list[str], sections: list[Section],
          links: dict[str, str]) -> str:
    esc = html.escape

    def linked(text: str) -> str:
        out = esc(text)
        for trace, url in links.items():
            out = out.replace(trace, f"<a href='{esc(url)}'>{trace}</a>")
        return out

    def cell(column: str, value: Any) -> str:
        if isinstance(value, list):  # several trace ids: one per line
            return "<td>" + "<br>".join(linked(str(v)) if column in LINKED_COLUMNS else esc(str(v))
                                        for v in value) + "</td>"
        text = _format(column, value)
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        body = linked(text) if column in LINKED_COLUMNS else esc(text)
        return f"<td class='num'>{body}</td>" if numeric else f"<td>{body}</td>"

    title = f"Incident report: {_window_text(window)}"
    quiet = "" if head.found else " quiet"
    out = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>",
           f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{STYLE}</style></head><body>",
           f"<h1>{esc(title)}</h1>", f"<section class='headline{quiet}' id='headline'>",
           f"<p class='sentence'>{linked(head.sentence)}</p><table class='facts'>"]
    out += [f"<tr><th>{esc(k)}</th><td>{linked(v)}</td></tr>" for k, v in head.facts]
    out.append("</table></section>")
    if head.also:
        out.append("<h2>Also in this window</h2><ul class='notes'>"
                   + "".join(f"<li>{linked(line)}</li>" for line in head.also) + "</ul>")
    if skipped:
        out.append("<h2>Not in this report</h2><ul class='notes' id='skipped'>"
                   + "".join(f"<li>{linked(line)}</li>" for line in skipped) + "</ul>")
    for section in sections:
        out.append(f"<h2>{esc(section.title)}</h2>")
        out += [f"<p>{linked(line)}</p>" for line in section.text]
        if section.image:
            out.append(f"<img src='{esc(section.image)}' alt='{esc(section.title)}'>")
        if section.table:
            out.append("<table class='rows'><tr>"
                       # a long column name may break after an underscore: a wide table still fits the page
                       + "".join(f"<th>{esc(_header(section, c)).replace('_', '_<wbr>')}</th>"
                                 for c in section.columns) + "</tr>")
            for row in section.table[:TABLE_ROWS]:
                out.append("<tr>" + "".join(cell(c, row.get(c)) for c in section.columns) + "</tr>")
            out.append("</table>")
            if len(section.table) > TABLE_ROWS:
                out.append(f"<p class='notes'>{len(section.table) - TABLE_ROWS} more rows not shown.</p>")
    out.append("<footer>All times are UTC. Written by infersight incident report.</footer></body></html>")
    return "\n".join(out)

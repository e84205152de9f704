"""What the demo saw, gathered from Prometheus, the Alertmanager webhook and ClickHouse, and printed."""

from __future__ import annotations

import datetime as dt
import math
import os
import statistics
from collections import defaultdict
from typing import Any

from infersight.commands.demo import SPEED
from infersight.commands.demo_stack import ON_CALL, StackError, prometheus_query
from infersight.commands.output import render

STALL_MS = 500  # a token gap this long is a stall people feel
STALLS_SHOWN = 10  # the terminal shows the longest; the report and --format json have them all
# Why the demo's report has no Prometheus charts: what is true, not "no Prometheus configured".
NO_PROMETHEUS_IN_REPORT = (
    "the demo's Prometheus kept its samples on the demo's compressed clock ({minutes} simulated minutes in as many "
    "real seconds), not on these spans' incident clock, so its queue and GPU series cannot be drawn beside them "
    "(the alerts it fired are in the demo's summary); on a real cluster the report draws them from --prometheus URL")


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC).replace(tzinfo=None)


def alerts_fired(prom_url: str, minute_at, start: float, end: float) -> list[dict[str, Any]]:
    """Each alert (name, severity) that fired, when first, on how many series, from Prometheus's ALERTS.

    The samples are read as stored (a range selector at ``end``), so a first firing is the evaluation that
    fired it; a range query would round it up to its next step, after Alertmanager had already sent it on.
    """
    window_ms = max(1, math.ceil((end - start) * 1000))
    data = prometheus_query(prom_url, "query", {"query": f'ALERTS{{alertstate="firing"}}[{window_ms}ms]',
                                                "time": f"{end:.3f}"})
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for series in data["result"]:
        labels = series["metric"]
        key = (labels.get("alertname", ""), labels.get("severity", ""))
        stamps = [float(t) for t, _v in series["values"] if float(t) >= start]
        if not stamps:
            continue
        ts = min(stamps)
        row = first.setdefault(key, {"alert": key[0], "severity": key[1], "first_ts": ts, "series": 0, "example": {}})
        row["series"] += 1
        if ts <= row["first_ts"]:
            row["first_ts"] = ts
            row["example"] = {k: v for k, v in labels.items() if k in ("model", "instance", "pool", "node", "gpu")}
    rows = sorted(first.values(), key=lambda r: r["first_ts"])
    for row in rows:
        row["minute"] = minute_at(row["first_ts"])
    return rows


def deliveries(webhook, minute_at) -> dict[tuple[str, str], dict[str, float]]:
    """(alert, severity) -> receiver -> simulated minute of its first firing notification."""
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for d in webhook.snapshot():
        for alert in d.alerts:
            if alert.get("status") != "firing":
                continue
            labels = alert.get("labels", {})
            key = (labels.get("alertname", ""), labels.get("severity", ""))
            out[key].setdefault(d.receiver, minute_at(d.received))
    return out


def targets_up(prom_url: str, seconds: float) -> dict[str, dict[str, Any]]:
    """Per scrape job: its targets, how many were ever up during the run, the share of good scrapes."""
    window = f"{max(1, round(seconds))}s"
    jobs: dict[str, dict[str, Any]] = {}
    for series in prometheus_query(prom_url, "query", {"query": f"avg_over_time(up[{window}])"})["result"]:
        job = series["metric"].get("job", "")
        share = float(series["value"][1])
        entry = jobs.setdefault(job, {"targets": 0, "ever_up": 0, "scrapes_ok": 1.0})
        entry["targets"] += 1
        entry["ever_up"] += int(share > 0)
        entry["scrapes_ok"] = round(min(entry["scrapes_ok"], share), 3)
    return jobs


def _verdict(scenario, alert: str, severity: str) -> str:
    """What the scenario file says about an alert that fired: expected, allowed (why), or neither."""
    if any(e.alert == alert and e.severity == severity for e in scenario.expect):
        return "expected"
    for allowed in scenario.may_fire:
        if allowed.alert == alert and allowed.severity == severity:
            return f"may fire: {allowed.reason}"
    if severity == "info":
        return "info (dashboards only)"
    return "not expected by the scenario"


def from_prometheus(run, prom_url: str, webhook, driver, start: float, end: float) -> dict[str, Any]:
    """The alerts that fired and reached on-call, and every scrape job's targets, while all still runs."""
    scenario, onset = run.scenario, run.scenario.onset_minute

    def minute_at(ts: float) -> float:
        return round(driver.sim_time_at(ts) / 60.0, 1)

    try:
        fired = alerts_fired(prom_url, minute_at, start, end)
        jobs = targets_up(prom_url, end - start)
    except (OSError, ValueError, StackError) as exc:
        raise StackError(f"Prometheus did not answer: {exc}") from None
    reached = deliveries(webhook, minute_at)
    for row in fired:
        # Real seconds the fleet's clock was held back in the ten real seconds (ten simulated minutes:
        # the longest `for:` and windows the rules wait) before it fired: Prometheus evaluated those
        # seconds at 60x while the fleet ran slower, so brief conditions looked longer to the rules.
        row["held_before_s"] = round(driver.held_between(row["first_ts"] - 10.0, row["first_ts"]), 1)
        row["after_onset"] = None if onset is None else round(row["minute"] - onset, 1)
        row["reached"] = reached.get((row["alert"], row["severity"]), {})
        row["scenario_says"] = _verdict(scenario, row["alert"], row["severity"])
    expected = []
    for e in scenario.expect:
        hit = next((r for r in fired if r["alert"] == e.alert and r["severity"] == e.severity), None)
        after = hit["after_onset"] if hit else None
        on_call = bool(hit) and any(r in ON_CALL for r in hit["reached"])
        expected.append({"alert": e.alert, "severity": str(e.severity), "within_minutes": e.within_minutes,
                         "fired_after_onset": after, "reached_on_call": on_call,
                         "ok": after is not None and after <= e.within_minutes and on_call,
                         "known_failure": e.known_failure})
    return {"scenario": scenario.name, "title": scenario.title, "onset_minute": onset, "minutes": run.minutes,
            "holds": len(driver.holds),
            "load_average": round(os.getloadavg()[0], 1), "cpus": os.cpu_count(),
            "speed": SPEED, "alerts": fired, "expected": expected, "scrape_jobs": jobs,
            "files": {"rules": str(run.out / "rules"),
                      "alertmanager": str(run.out / "alertmanager" / "alertmanager.yml"),
                      "prometheus": str(run.out / "prometheus" / "prometheus.yml")}}


def from_clickhouse(run, reader, base: float) -> dict[str, Any]:
    """The slowest requests and their neighbours, stalls, the pools side by side, and the incident report."""
    from infersight.pipelines.queries import library
    from infersight.pipelines.queries.report import Settings, write_report
    from infersight.pipelines.queries.window import Window
    from infersight.pipelines.schema.ddl import Tables

    start, end = _utc(base), _utc(base + run.minutes * 60 + 120)
    tables = Tables.from_config(run.config)
    slowest = library.slowest(reader, "default", start, end, by="ttft", limit=5, tables=tables)
    chains: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for attempt in library.retries(reader, "default", start, end, limit=10_000, tables=tables):
        chains[attempt["trace_id"]].append(attempt)
    for row in slowest:
        row["attempts"] = _attempts(chains.get(row["trace_id"], []))
    failed = [r for r in library.attempt_failures(reader, "default", start, end, tables=tables) if r["failed_attempts"]]
    neighbours: list[dict[str, Any]] = []
    stall: dict[str, Any] | None = None
    if slowest and slowest[0]["instance"]:
        worst = slowest[0]
        # Its longest token gap, and what else was on its instance at that second (from ClickHouse),
        # beside what the simulated instance was doing then (from the simulator's decode steps).
        at = worst["stall_at"] or worst["started"] + dt.timedelta(milliseconds=(worst["ttft_ms"] or 0) / 2)
        gap_ms = worst["max_gap_ms"] or 0.0
        during = at + dt.timedelta(milliseconds=gap_ms / 2)  # mid-gap: what ran while its stream stood still
        neighbours = library.neighbors(reader, "default", worst["instance"], during, tables=tables)
        gaps = [t["gap_ms"] for t in library.token_timeline(reader, "default", worst["trace_id"], tables=tables)
                if t["token_index"] > 0]
        stall = {"trace_id": worst["trace_id"], "instance": worst["instance"], "at": at,
                 "gap_ms": worst["max_gap_ms"], "median_gap_ms": round(statistics.median(gaps), 1) if gaps else None,
                 "simulated": None}
        moment = (run.decode_log.moment(worst["instance"], (during - start).total_seconds())
                  if run.decode_log else None)
        if moment is not None:
            prefill = None
            if moment.prefill is not None:  # the prompt whose prefill chunks made those steps long
                rid, tokens = moment.prefill
                prefill = {"prompt_tokens": tokens, "trace_id": run.trace_ids.get(rid)}
            # the counts are the tick's end; a prompt whose chunks made the gap was in prefill during it
            prefilling = max(moment.prefilling, 1 if moment.prefill is not None else 0)
            stall["simulated"] = {"decoding": moment.decoding, "prefilling": prefilling,
                                  "waiting": moment.waiting, "kv_usage": round(moment.kv_usage, 3),
                                  "step_ms": None if moment.step_s is None else round(moment.step_s * 1000, 1),
                                  "prefill": prefill}
    stalls = library.window_stalls(reader, "default", start, end, min_gap_ms=STALL_MS, tables=tables)
    pools = library.compare_pools(reader, "default", start, end, tables=tables)
    report = write_report(reader, "default", Window(start, end), run.out / "report", min_gap_ms=STALL_MS,
                          prometheus_url=None, settings=Settings.from_config(run.config),
                          no_prometheus_because=NO_PROMETHEUS_IN_REPORT.format(minutes=run.minutes))
    spans = reader.query(f"SELECT count(), countIf(IsRequest) FROM {tables.traces}").result_rows[0]
    tokens = reader.query(f"SELECT count() FROM {tables.token_events}").result_rows[0][0]
    return {
        "spans_stored": spans[0], "request_spans": spans[1], "token_rows": tokens,
        "incident_clock": {"start": start, "end": end,
                           "note": "spans carry the simulated times: the scenario ends a minute before the demo "
                                   "started"},
        "slowest_by_ttft": slowest, "stall_of_slowest": stall, "neighbours_of_slowest": neighbours,
        "failed_attempts": failed, "retried_requests": len(chains), "stalls": stalls, "pools": pools,
        "report": [str(p) for p in report], "report_html": str(report.html),
        "report_headline": report.headline.sentence,
    }


def _attempts(chain: list[dict[str, Any]]) -> str:
    """``1``, or ``2 (1 failed: upstream_unreachable on sim-n01:8003)``: a request's upstream attempts."""
    if len(chain) < 2:
        return "1"
    failed = [a for a in chain if a["status"] == "error"]
    where = ", ".join(f"{a['error'] or 'error'} on {a['instance']}" for a in failed)
    return f"{len(chain)} ({len(failed)} failed: {where})" if failed else str(len(chain))


def print_summary(s: dict[str, Any]) -> None:
    onset = s["onset_minute"]
    print(f"\n{s['scenario']}: {s['title']}")
    print(f"  {s['minutes']} simulated minutes in {s['real_seconds']:g} s ({s['speed']:g}x), whole demo "
          f"{s['total_seconds']:g} s" + (f"; incident onset at minute {onset:g}" if onset is not None else ""))
    if s["held_s"] > 1:
        speed = s["minutes"] * 60 / s["real_seconds"] if s["real_seconds"] else s["speed"]
        print(f"  NOTE: this machine was too busy to keep up: the fleet fell behind real time {s['holds']} times and "
              f"its clock was held back {s['held_s']:g} s in all (it ran at {speed:.0f}x on average, not "
              f"{s['speed']:g}x; load average {s['load_average']:.1f} on {s['cpus']} CPUs). Prometheus evaluated the "
              "rules at 60x meanwhile, so brief conditions looked longer to them: an alert marked 'after a hold' "
              "may be the machine's doing, not the incident's. Run it again on a quieter machine.")
    print("\nAlerts that fired (Prometheus ALERTS), and where Alertmanager sent them "
          "(minutes are simulated minutes after onset):")
    rows, notes = [], []
    for r in s["alerts"]:
        verdict = r["scenario_says"]
        if verdict.startswith("may fire: "):
            notes.append(f"  {r['alert']} ({r['severity']}) may fire here: {verdict.removeprefix('may fire: ')}")
            verdict = "may fire"
        elif verdict == "not expected by the scenario":
            verdict = "NOT EXPECTED"
        if r.get("held_before_s", 0) > 1:
            verdict += f" (after a {r['held_before_s']:g} s hold)"
        rows.append({"alert": r["alert"], "severity": r["severity"], "fired": _plus(r["after_onset"]),
                     "reached": ", ".join(f"{k} {_plus(v - onset if onset is not None else v)}"
                                          for k, v in sorted(r["reached"].items())) or "-",
                     "scenario": verdict, "series": r["series"],
                     "example": " ".join(f"{k}={v}" for k, v in r["example"].items())})
    print(render(rows, "table", ["alert", "severity", "fired", "reached", "scenario", "series", "example"]) if rows
          else "  (none)")
    for note in notes:
        print(note)
    if s["expected"]:
        print("\nWhat this scenario must trip:")
        for e in s["expected"]:
            verdict = "ok" if e["ok"] else ("known failure: " + e["known_failure"] if e["known_failure"] else "MISSED")
            fired = _plus(e["fired_after_onset"]) if e["fired_after_onset"] is not None else "did not fire"
            print(f"  {e['alert']} ({e['severity']}): {fired}, deadline +{e['within_minutes']:g} min, "
                  f"{'reached on-call' if e['reached_on_call'] else 'not delivered to on-call'}: {verdict}")
    jobs = ", ".join(f"{job} {v['ever_up']}/{v['targets']} ({v['scrapes_ok']:.0%} of scrapes)"
                     for job, v in sorted(s["scrape_jobs"].items()))
    print(f"\nPrometheus scraped: {jobs}")
    slow = [job for job, v in s["scrape_jobs"].items() if v["scrapes_ok"] < 0.9]
    if slow:
        print(f"  {', '.join(sorted(slow))} missed scrapes: the exporter did not answer within the scrape timeout "
              f"(load average {s['load_average']:.1f} on {s['cpus']} CPUs); that is what InfersightExporterDown "
              "reports")
    print(f"\n{s['spans_stored']} spans ({s['request_spans']} requests traced of {s['requests_replayed']} served), "
          f"{s['token_rows']} token rows in ClickHouse, on the incident's clock "
          f"{s['incident_clock']['start']:%H:%M}-{s['incident_clock']['end']:%H:%M} UTC")
    print("\nSlowest first tokens (infersight traces slowest --by ttft):")
    print(render(s["slowest_by_ttft"], "table", ["trace_id", "started", "instance", "pool", "ttft_ms", "e2e_ms",
                                                  "max_gap_ms", "input_tokens", "attempts", "outcome"]))
    stall = s.get("stall_of_slowest")
    if stall:
        median = stall.get("median_gap_ms")
        usual = f" (its median gap {median:,.0f} ms)" if median else ""
        print(f"\nThe slowest request's longest token gap: {stall['gap_ms'] or 0:,.0f} ms{usual} at "
              f"{stall['at']:%H:%M:%S} UTC on {stall['instance']}")
        sim = stall["simulated"]
        if sim:
            step = "no decode step" if sim["step_ms"] is None else f"one decode step every {sim['step_ms']:,.0f} ms"
            cause = ""
            if sim.get("prefill"):
                trace = sim["prefill"]["trace_id"]
                cause = (f"; each step carried a chunk of a {sim['prefill']['prompt_tokens']:,}-token prompt's prefill"
                         + (f" (trace {trace})" if trace else ""))
            print(f"  the simulated instance then: {sim['decoding']} decoding, {sim['prefilling']} in prefill, "
                  f"{sim['waiting']} waiting, KV cache {sim['kv_usage']:.0%} full: {step}{cause}")
    if s["neighbours_of_slowest"]:
        phases: dict[str, int] = defaultdict(int)
        for n in s["neighbours_of_slowest"]:
            phases[n["phase"]] += 1
        print(f"  traced requests on {stall['instance']} mid-gap (infersight traces neighbors; "
              f"{s['head_ratio']:.0%} of requests are traced, slow and failed ones always): "
              + ", ".join(f"{n} {p}" for p, n in sorted(phases.items())))
        print(render(s["neighbours_of_slowest"][:8], "table", ["trace_id", "phase", "running_for_ms",
                                                                "prompt_tokens", "cached_tokens", "ttft_ms"]))
        if len(s["neighbours_of_slowest"]) > 8:
            print(f"  ... and {len(s['neighbours_of_slowest']) - 8} more")
    print(f"\nFailed upstream attempts (infersight traces retries): {s['retried_requests']} requests re-attempted")
    if s["failed_attempts"]:
        print(render(s["failed_attempts"], "table", ["instance", "attempts", "failed_attempts", "errors",
                                                      "failed_median_ms", "requests_hit"]))
    else:
        print("  (none: no attempt broke in this scenario; 'infersight demo --scenario gpu-off-bus' has some)")
    stalls = s["stalls"]
    print(f"\nToken stalls over {STALL_MS} ms by instance and minute (infersight traces stalls)"
          + (f": the {STALLS_SHOWN} longest of {len(stalls)}" if len(stalls) > STALLS_SHOWN else "") + ":")
    if stalls:
        from infersight.pipelines.queries.report import longest_stalls

        print(render(longest_stalls(stalls, STALLS_SHOWN), "table",
                     ["instance", "minute", "requests", "max_gap_ms", "mean_gap_ms"]))
        if len(stalls) > STALLS_SHOWN:
            minutes = sorted({r["minute"] for r in stalls})
            instances = len({r["instance"] for r in stalls})
            print(f"  ... {len(stalls) - STALLS_SHOWN} more instance-minutes, on {instances} instances from "
                  f"{minutes[0]:%H:%M} to {minutes[-1]:%H:%M} UTC: 'infersight traces stalls' over the window above "
                  "lists them all")
    else:
        print("  (none)")
    print("\nPools side by side (infersight traces compare):")
    print(render(s["pools"], "table"))
    if len({p["pool"] for p in s["pools"]}) < 2:
        print("  (this scenario has one pool; 'infersight demo --scenario canary-hot-spot' compares a canary "
              "that makes a hot spot)")
    f = s["files"]
    print(f"\nIncident report: {s['report_headline']}\n  {s['report_html']}")
    print(f"Rules Prometheus evaluated (the generated ones, durations / {s['speed']:g}): {f['rules']}")
    print(f"Alertmanager routing: {f['alertmanager']}    Prometheus config: {f['prometheus']}")
    print("For your own cluster: infersight alerts build --out DIR; infersight dashboards build --out DIR")


def _plus(minutes: float | None) -> str:
    if minutes is None:
        return "-"
    return f"{'+' if minutes >= 0 else ''}{minutes:g} min"

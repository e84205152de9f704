"""What happened, in words: the incident report's headline from the query results.

Pure functions over the library's rows, so the wording is tested without a database. The headline
names one primary finding (a token stall beats failing attempts: a stall is what users felt, a
retried failure mostly cost time), the facts an on-call engineer asks first (cause, instance,
start, duration, requests hit, SLO impact), and the other findings as one line each.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Slo:
    """The SLO the report judges against (from the config's slo section)."""

    ttft_ms: float  # a request's first token within this...
    objective: float  # ...for this share of requests
    ttft_p95_ms: float  # the p95 target the dashboards draw


@dataclass
class Stall:
    instance: str
    at: dt.datetime  # when the longest gap began
    gap_ms: float
    neighbors: list[dict[str, Any]]  # what ran on the instance mid-gap
    requests: int  # stalled requests on the instance in the window

    @property
    def culprit(self) -> dict[str, Any] | None:
        """The biggest prompt in prefill on the instance during the gap: the usual cause."""
        prefill = [r for r in self.neighbors if r["phase"] == "prefill"]
        return max(prefill, key=lambda r: r["prompt_tokens"]) if prefill else None


@dataclass
class Finding:
    what: str  # "Decoding stalled", "Upstream attempts failed"
    cause: str  # why, without the instance (it is a fact of its own)
    instance: str | None = None
    start: dt.datetime | None = None
    duration_ms: float | None = None
    requests_hit: int | None = None
    when: str = ""  # the time in words, e.g. "at 14:05:00.000 UTC for 3.0 s"

    def line(self) -> str:
        return f"{self.what} on {self.instance} {self.when}: {self.cause}."


@dataclass
class Headline:
    sentence: str  # one line: what the terminal prints first
    facts: list[tuple[str, str]]  # (Cause, ...), (Instance, ...), ...
    also: list[str] = field(default_factory=list)  # other findings, one line each
    found: bool = True  # False: nothing abnormal in the window


def clock(at: dt.datetime | None, date: bool = False) -> str:
    """``14:05:07.250 UTC`` (with the date when asked): milliseconds, never microseconds."""
    if at is None:
        return "-"
    text = at.strftime("%Y-%m-%d %H:%M:%S.%f" if date else "%H:%M:%S.%f")[:-3]
    return f"{text} UTC"


def duration(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:,.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:,.1f} s"
    return f"{ms / 60_000:,.1f} min"


def sentence_case(text: str) -> str:
    return text[:1].upper() + text[1:]


def stall_finding(stall: Stall) -> Finding:
    culprit = stall.culprit
    if culprit:
        cached = ("no cached prefix" if not culprit["prefix_cached"]
                  else f"{culprit['cached_tokens']:,} tokens cached")
        cause = (f"a {culprit['prompt_tokens']:,}-token prompt ({cached}) in prefill on the same instance "
                 f"held up decoding (trace {culprit['trace_id']})")
    elif stall.neighbors:
        cause = "no prefill was running there; look at the instance's GPU and queue below"
    else:
        cause = "no other request span covers that moment (unsampled, or from a service that is not traced)"
    return Finding("Decoding stalled", cause, stall.instance, stall.at, stall.gap_ms, stall.requests,
                   f"at {clock(stall.at)} for {duration(stall.gap_ms)}")


def failure_finding(row: dict[str, Any], pool: str, retried_ok: int) -> Finding:
    errors = ", ".join(row["errors"]) or "no error.type"
    cause = (f"{row['failed_attempts']} of {row['attempts']} upstream attempts failed ({errors}), "
             f"typically after {duration(row['failed_median_ms'])}")
    if pool:
        cause += f", in the {pool} pool"
    if retried_ok:
        cause += f"; {retried_ok} of the {row['requests_hit']} requests hit were retried elsewhere and succeeded"
    first, last = row["first_failure"], row["last_failure"]
    span_ms = (last - first).total_seconds() * 1000 + (row["failed_median_ms"] or 0)
    when = (f"at {clock(first)}" if row["failed_attempts"] == 1
            else f"from {clock(first)} to {clock(last)}")
    return Finding("Upstream attempts failed", cause, row["instance"], first, span_ms, row["requests_hit"], when)


def slo_missed(impact: dict[str, Any], slo: Slo) -> bool:
    """More of the window's requests missed the TTFT SLO (or failed) than the error budget allows."""
    return bool(impact["requests"]) and impact["over_slo"] / impact["requests"] > 1 - slo.objective


def slo_line(impact: dict[str, Any], slo: Slo) -> str:
    requests = impact["requests"]
    if not requests:
        return "no requests"
    over = impact["over_slo"]
    share = over / requests
    budget = 1 - slo.objective
    verdict = f"{share / budget:.1f}x" if slo_missed(impact, slo) else "within"
    p95 = impact["ttft_p95_ms"]
    p95_text = "" if p95 is None or p95 != p95 else (
        f"; TTFT p95 {p95:,.0f} ms against a {slo.ttft_p95_ms:,.0f} ms target")
    return (f"{over} of {requests} requests ({share:.1%}) missed TTFT {slo.ttft_ms:,.0f} ms or failed: "
            f"{verdict} the {budget:.1%} error budget of the {slo.objective:.1%} objective{p95_text}")


def headline(window_text: str, impact: dict[str, Any], slo: Slo, stalls: list[Stall],
             failures: list[dict[str, Any]], pools: dict[str, str], retries: list[dict[str, Any]],
             min_gap_ms: float) -> Headline:
    if not impact["requests"]:
        sentence = f"No request spans between {window_text}: check the window (--since, --from/--to) and the DSN."
        return Headline(sentence, [("Cause", "no traffic recorded in this window")], found=False)
    findings = [stall_finding(s) for s in stalls]
    failing = [r for r in failures if r["failed_attempts"]]
    findings += [failure_finding(r, pools.get(r["instance"], ""), _retried_ok(r["instance"], retries))
                 for r in failing]
    slo_text = slo_line(impact, slo)
    if not findings and slo_missed(impact, slo):
        # No stall and no failed attempt, yet the budget is spent: the time went before the first token
        # (queueing, prefill), which the per-instance and per-pool TTFT below show; never "no incident".
        # The sentence is the SLO impact here: the facts add only what it does not say (said once, not thrice).
        cause = (f"requests waited before their first token: no inter-token gap over {min_gap_ms:g} ms and no "
                 "failed upstream attempt, so look at queueing and prefill per instance and pool below")
        return Headline(f"TTFT SLO missed: {slo_text}.", [("Cause", sentence_case(cause))])
    if not findings:
        cause = f"nothing abnormal found: no inter-token gap over {min_gap_ms:g} ms and no failed upstream attempt"
        return Headline(f"No incident found: {slo_text}.", [("Cause", sentence_case(cause))], found=False)
    first = findings[0]
    facts = [("Cause", sentence_case(first.cause)), ("Instance", first.instance or "-"),
             ("Start", clock(first.start, date=True)), ("Duration", duration(first.duration_ms)),
             ("Requests hit", "-" if first.requests_hit is None else f"{first.requests_hit:,}"),
             ("SLO impact", slo_text)]
    return Headline(first.line(), facts, [f.line() for f in findings[1:]])


def _retried_ok(instance: str, retries: list[dict[str, Any]]) -> int:
    """Requests with a failed attempt on ``instance`` whose last attempt succeeded."""
    chains: dict[str, list[dict[str, Any]]] = {}
    for row in retries:
        chains.setdefault(row["trace_id"], []).append(row)
    return sum(1 for attempts in chains.values()
               if any(a["instance"] == instance and a["status"] == "error" for a in attempts)
               and max(attempts, key=lambda a: a["attempt"])["status"] == "ok")

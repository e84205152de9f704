"""The report's headline wording from query rows (pipelines/queries/findings.py), without a database."""

from __future__ import annotations

import datetime as dt

from infersight.pipelines.queries import findings as f

SLO = f.Slo(ttft_ms=1000.0, objective=0.99, ttft_p95_ms=1000.0)
T = dt.datetime(2026, 3, 1, 14, 5, 7, 250000)


def impact(requests=100, over=0, p95=120.0):
    return {"requests": requests, "over_slo": over, "ttft_p95_ms": p95, "service": "gateway"}


def attempts(instance="10.0.0.4:8000", attempts=40, failed=5, errors=("http_503",), median=2.1, hit=5):
    last = T + dt.timedelta(seconds=30)
    return {"instance": instance, "attempts": attempts, "failed_attempts": failed, "errors": list(errors),
            "failed_median_ms": median, "first_failure": T if failed else None,
            "last_failure": last if failed else None, "requests_hit": hit}


def chain(trace, *steps):
    return [{"trace_id": trace, "attempt": n, "instance": i, "status": s} for n, (i, s) in enumerate(steps)]


def test_no_traffic_says_check_the_window():
    head = f.headline("w", impact(requests=0), SLO, [], [], {}, [], 500)
    assert not head.found and head.sentence.startswith("No request spans between w")


def test_a_quiet_window_says_nothing_abnormal_and_the_slo():
    head = f.headline("w", impact(over=0), SLO, [], [attempts(failed=0)], {}, [], 500)
    assert not head.found
    assert head.sentence == ("No incident found: 0 of 100 requests (0.0%) missed TTFT 1,000 ms or failed: within the "
                             "1.0% error budget of the 99.0% objective; TTFT p95 120 ms against a 1,000 ms target.")
    # said once: the facts do not repeat the sentence
    assert [k for k, _ in head.facts] == ["Cause"] and "0 of 100" not in dict(head.facts)["Cause"]


def test_a_spent_budget_with_no_stall_or_failure_is_an_incident_not_a_quiet_window():
    # 40 of 100 first tokens late, nothing stalled, nothing failed: the time went in queueing or prefill
    head = f.headline("w", impact(over=40), SLO, [], [attempts(failed=0)], {}, [], 500)
    assert head.found and "No incident" not in head.sentence
    assert head.sentence.startswith("TTFT SLO missed: 40 of 100 requests (40.0%) missed TTFT 1,000 ms or failed: "
                                    "40.0x the 1.0% error budget")
    assert dict(head.facts)["Cause"].startswith("Requests waited before their first token")
    assert not any("40 of 100" in v for _, v in head.facts)  # the sentence is the SLO impact: not said again


def test_failing_first_attempts_retried_to_success_lead_when_nothing_stalled():
    retries = chain("a", ("10.0.0.4:8000", "error"), ("10.0.0.1:8000", "ok")) + \
        chain("b", ("10.0.0.4:8000", "error"), ("10.0.0.2:8000", "error"))
    head = f.headline("w", impact(over=3), SLO, [], [attempts()], {"10.0.0.4:8000": "canary"}, retries, 500)
    facts = dict(head.facts)
    assert head.found and facts["Instance"] == "10.0.0.4:8000" and facts["Requests hit"] == "5"
    assert facts["Start"] == "2026-03-01 14:05:07.250 UTC" and facts["Duration"] == "30.0 s"
    assert facts["Cause"] == ("5 of 40 upstream attempts failed (http_503), typically after 2 ms, in the canary "
                              "pool; 1 of the 5 requests hit were retried elsewhere and succeeded")
    assert "3.0x the 1.0% error budget" in facts["SLO impact"]
    assert head.sentence.startswith("Upstream attempts failed on 10.0.0.4:8000 from 14:05:07.250 UTC to "
                                    "14:05:37.250 UTC")


def test_a_stall_leads_and_names_the_prompt_in_prefill():
    neighbors = [{"phase": "prefill", "prompt_tokens": 32000, "prefix_cached": False, "cached_tokens": 0,
                  "trace_id": "c" * 32}, {"phase": "decode", "prompt_tokens": 800, "prefix_cached": True,
                                          "cached_tokens": 512, "trace_id": "d" * 32}]
    stall = f.Stall("10.0.0.2:8000", T, 3000.0, neighbors, requests=2)
    head = f.headline("w", impact(), SLO, [stall], [attempts()], {}, [], 500)
    assert head.sentence == ("Decoding stalled on 10.0.0.2:8000 at 14:05:07.250 UTC for 3.0 s: a 32,000-token prompt "
                             f"(no cached prefix) in prefill on the same instance held up decoding (trace {'c' * 32}).")
    assert len(head.also) == 1 and head.also[0].startswith("Upstream attempts failed on 10.0.0.4:8000")


def test_durations_and_clock_read_plainly():
    assert [f.duration(v) for v in (2.4, 583.0, 3000.0, 300_000.0, None)] == ["2 ms", "583 ms", "3.0 s", "5.0 min", "-"]
    assert f.clock(T) == "14:05:07.250 UTC" and f.clock(None) == "-"

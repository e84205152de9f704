"""Multi-window, multi-burn-rate alerts on the TTFT SLO (the SRE workbook's recipe).

A request is "good" when its first token came within ``slo.ttft_seconds``, read from the histogram
bucket at exactly that bound (the config refuses a value that is not a bucket bound). The page
fires when the budget burns 14.4x over 1h (confirmed over 5m) or 6x over 6h (confirmed over 30m);
the ticket at 3x over 1d (2h) or 1x over 3d (6h). Both share one alertname, so Alertmanager's
"critical silences warning of the same alert" inhibition applies.
"""

from __future__ import annotations

import dataclasses
import math

from infersight.alerts.model import Alert, Case, Expected, Severity, SignalClass
from infersight.alerts.promql import num
from infersight.alerts.recording import slo_errors_name
from infersight.alerts.rules.common import MODEL, lab, request_labels, require, val
from infersight.alerts.series import histogram
from infersight.signals import request
from infersight.thresholds import Thresholds

NAME = "LLMTTFTErrorBudgetBurn"


def _expr(windows, budget: float) -> str:
    branches = [f"{slo_errors_name(w.long)} > {num(w.factor * budget)} and "
                f"{slo_errors_name(w.short)} > {num(w.factor * budget)}" for w in windows]
    # The value is the long window's error ratio over the budget: the burn rate.
    return "(\n  " + "\nor\n  ".join(branches) + f"\n) / {num(budget)}"


def _traffic(limits: Thresholds, burn: float, minutes: int):
    """1000 requests a minute, ``burn`` x budget of them slower than the SLO."""
    per_minute = 1000
    bad = round(burn * limits.error_budget * per_minute)
    require(0 < bad < per_minute, f"burn {burn} needs between 0 and {per_minute} slow requests a minute")
    buckets = request.TTFT.buckets
    above = next((b for b in buckets if b > limits.ttft_slo_seconds), math.inf)
    observations = {limits.ttft_slo_seconds: per_minute - bad, above: bad}
    return histogram(request.TTFT, request_labels(), [(observations, minutes)]), bad / per_minute / limits.error_budget


def alerts(limits: Thresholds) -> list[Alert]:
    b = limits.error_budget
    objective = f"{num((1 - b) * 100)}% within {num(limits.ttft_slo_seconds)}s"
    common = dict(name=NAME, signal=SignalClass.SLO,
                  description=(f"{lab('model')} is burning its TTFT error budget at {val(1)}x (objective "
                               f"{objective}; see the burn windows in the rule)."))
    page = Alert(expr=_expr(limits.page_burn, b), for_="2m", severity=Severity.CRITICAL,
                 summary="TTFT error budget is burning fast: the SLO will be missed within hours.", **common)
    ticket = Alert(expr=_expr(limits.ticket_burn, b), for_="15m", severity=Severity.WARNING,
                   summary="TTFT error budget is burning steadily: the SLO will be missed this month.", **common)
    fast, fast_burn = _traffic(limits, 15, 30)
    medium, medium_burn = _traffic(limits, 5.5, 30)
    slow, slow_burn = _traffic(limits, 4, 30)
    calm, _ = _traffic(limits, 0.9, 30)
    (fast_page, slow_page), ticket_band = limits.page_burn, limits.ticket_burn[0]
    require(fast_burn > fast_page.factor and ticket_band.factor < slow_burn < slow_page.factor
            and ticket_band.factor < medium_burn < slow_page.factor, "burn rates must sit between bands")
    labels = {"model": MODEL}
    page = dataclasses.replace(page, cases=[
        Case("burning at 15x", fast, 10, [Expected(labels, fast_burn)]),
        # Just under the 6x page band: no page, but the ticket is cut.
        Case("burning at 5.5x, just under the page", medium, 20, [Expected(labels, medium_burn, alert=ticket)]),
    ])
    ticket = dataclasses.replace(ticket, cases=[
        Case("burning at 4x", slow, 20, [Expected(labels, slow_burn)]),
        Case("burning at 0.9x, inside the budget", calm, 20),
    ])
    return [page, ticket]

"""The gateway-queue alert fires on what the llm-d EPP source emits (promtool over the normalizer's series).

Each minute's EPP text is today's dual-emission fixture (llm_d_epp_* and the deprecated twins side by
side) with that minute's flow-control queue; the series are what collectors/gateway makes of it. The
incident: flow control saturated for the qwen pool, 52 requests of team-a and 19 of team-b held.
The EPP's request counters grow by what each pool completes a minute (a snapshot repeated every
minute would complete nothing, and a queue that never drains waits forever): the alert reads the
queue in seconds of drain, queued requests over the pool's completion rate.
"""

from __future__ import annotations

import re

import pytest

from infersight.alerts.model import Expected
from infersight.collectors.gateway.normalize import normalize
from tests.alerts.from_sources import alert, input_series, run_cases
from tests.collectors.test_gateway_sources import EPP_NOW
from tests.conftest import require_tool

pytestmark = pytest.mark.real  # promtool

QUEUE_LINE = re.compile(r'^((?:llm_d_epp|inference_extension)_flow_control_queue_size\{fairness_id="(team-[ab])",'
                        r'[^}]*inference_pool="qwen-pool"[^}]*\}) \S+$', re.M)


# Both names of the EPP's request counter (the current one and its deprecated twin), per model.
REQUEST_LINE = re.compile(r'^((llm_d_epp|inference_objective)_request_total\{[^}]*'
                          r'target_model_name="([^"]+)"[^}]*\}) (\S+)$', re.M)


def epp_minute(team_a: int, team_b: int, minute: int, completed_per_s: dict[str, float]) -> str:
    """The fixture at ``minute``: this minute's flow-control queue, and request counters grown by each
    model's completions since minute 0, split over a model's series as the fixture splits its counts."""
    held = {"team-a": team_a, "team-b": team_b}
    text = QUEUE_LINE.sub(lambda m: f"{m.group(1)} {held[m.group(2)]}", EPP_NOW)
    totals: dict[tuple[str, str], float] = {}
    for _series, name, model, value in REQUEST_LINE.findall(EPP_NOW):
        totals[name, model] = totals.get((name, model), 0.0) + float(value)

    def grown(m: re.Match) -> str:
        series, name, model, value = m.group(1), m.group(2), m.group(3), float(m.group(4))
        share = value / totals[name, model]
        return f"{series} {value + completed_per_s[model] * 60 * minute * share}"
    return REQUEST_LINE.sub(grown, text)


def minutes(texts: list[str]) -> list[list]:
    return [[(signal, [s.labels[k] for k in signal.labels], s.value)
             for signal, samples in normalize(text).samples.items() for s in samples
             if not s.name.endswith(("_bucket", "_sum", "_count"))] for text in texts]


def test_gateway_queue_alert_fires_from_epp_series(tmp_path):
    require_tool("promtool")
    queue_high = alert("LLMGatewayQueueHigh")
    # The incident: 71 held in a qwen pool completing 20 requests/s, 3.55 s of waiting; the llama pool
    # holds the fixture's 2 while completing 30/s (0.07 s, under the 0.1 s bar).
    saturated_rates = {"qwen3-8b": 20.0, "llama-3.1-8b": 30.0}
    saturated = input_series(minutes([epp_minute(52, 19, m, saturated_rates) for m in range(45)]))
    # The fixture's own queue, 31 + 9 = 40, in a large pool completing 500 requests/s: 0.08 s, quiet.
    # Counting the deprecated twin as well would read 80 held, 0.16 s, and page.
    busy_rates = {"qwen3-8b": 500.0, "llama-3.1-8b": 30.0}
    normal = input_series(minutes([epp_minute(31, 9, m, busy_rates) for m in range(45)]))
    result = run_cases(tmp_path, [
        ("epp: flow control holds 71 qwen requests for 45 minutes, the pool completing 20/s", queue_high,
         saturated, 45, [Expected({"model": "qwen3-8b", "pool": "qwen-pool"}, 71 / 20)]),
        ("epp: 40 held, counted once though the EPP writes both names", queue_high, normal, 45, []),
    ])
    assert result.ok, result.output

"""The gateway-queue alert fires on what the llm-d EPP source emits (promtool over the normalizer's series).

Each minute's EPP text is today's dual-emission fixture (llm_d_epp_* and the deprecated twins side by
side) with that minute's flow-control queue; the series are what collectors/gateway makes of it. The
incident: flow control saturated for the qwen pool, 52 requests of team-a and 19 of team-b held.
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


def epp_minute(team_a: int, team_b: int) -> str:
    held = {"team-a": team_a, "team-b": team_b}
    return QUEUE_LINE.sub(lambda m: f"{m.group(1)} {held[m.group(2)]}", EPP_NOW)


def minutes(texts: list[str]) -> list[list]:
    return [[(signal, [s.labels[k] for k in signal.labels], s.value)
             for signal, samples in normalize(text).samples.items() for s in samples
             if not s.name.endswith(("_bucket", "_sum", "_count"))] for text in texts]


def test_gateway_queue_alert_fires_from_epp_series(tmp_path):
    require_tool("promtool")
    queue_high = alert("LLMGatewayQueueHigh")
    saturated = input_series(minutes([epp_minute(52, 19)] * 45))
    # The fixture's own queue: 31 + 9. Counting the deprecated twin as well would read 80 and page.
    normal = input_series(minutes([epp_minute(31, 9)] * 45))
    result = run_cases(tmp_path, [
        ("epp: flow control holds 71 qwen requests for 45 minutes", queue_high, saturated, 45,
         [Expected({"model": "qwen3-8b", "pool": "qwen-pool"}, 71)]),
        ("epp: 40 held, counted once though the EPP writes both names", queue_high, normal, 45, []),
    ])
    assert result.ok, result.output

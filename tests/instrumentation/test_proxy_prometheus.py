"""A real Prometheus scrapes the proxy's /metrics and answers queries built from the catalog."""

from __future__ import annotations

import openai
import pytest

from infersight.signals import request as request_signals
from tests.instrumentation.proxy_harness import ProxyStack


@pytest.mark.real
def test_prometheus_scrapes_the_proxy(prometheus_server):
    stack = ProxyStack()
    try:
        with openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=10) as client:
            for _ in range(3):
                list(client.chat.completions.create(model="standin-model", stream=True,
                                                    messages=[{"role": "user", "content": "hi"}]))
        prometheus = prometheus_server([stack.url.removeprefix("http://")])
        result = prometheus.wait_for(request_signals.REQUESTS.select(outcome="success", model="standin-model"))
        assert float(result[0]["value"][1]) == 3
        count = prometheus.wait_for(request_signals.TTFT.count(model="standin-model"))
        assert float(count[0]["value"][1]) == 3
    finally:
        stack.close()

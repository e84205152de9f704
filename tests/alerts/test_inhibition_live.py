"""Inhibition proven on a real Alertmanager: alerts posted to its API, the inhibited ones reported so."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import free_port, require_tool, wait_http

pytestmark = pytest.mark.real  # a real Alertmanager


@pytest.fixture
def alertmanager(default_build, tmp_path):
    binary = require_tool("prometheus-alertmanager")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "alertmanager.log", "wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={default_build.alertmanager}", f"--storage.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],  # no gossip port
        stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_http(url + "/-/ready")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(tmp_path / "data", ignore_errors=True)


def _alert(name: str, severity: str, signal: str, **labels: str) -> dict:
    return {"labels": {"alertname": name, "severity": severity, "signal": signal, **labels},
            "annotations": {"summary": name}}


def _post(url: str, alerts: list[dict]) -> None:
    request = urllib.request.Request(url + "/api/v2/alerts", data=json.dumps(alerts).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def _states(url: str) -> dict[tuple, list[str]]:
    with urllib.request.urlopen(url + "/api/v2/alerts", timeout=5) as response:
        alerts = json.load(response)
    return {tuple(sorted(a["labels"].items())): a["status"]["inhibitedBy"] for a in alerts}


def test_inhibitions_live(alertmanager):
    cb, ov, gpu = "circuit_breaker", "overload", "gpu"
    sources = [
        _alert("LLMEjectionCascade", "critical", cb, cluster="c1", model="m1", pool="stable"),
        _alert("LLMFleetOverloaded", "critical", ov, cluster="c1", model="m1"),
        _alert("GPUXidError", "critical", gpu, cluster="c1", node="n1", gpu="0", xid="79"),
    ]
    inhibited = [
        # the cascade explains the slow instances of its own pool
        _alert("LLMInstanceTTFTP99High", "warning", cb, cluster="c1", model="m1", instance="e1:8000", pool="stable"),
        _alert("LLMColdStartThrash", "warning", cb, cluster="c1", model="m1", instance="e7:8000", pool="stable"),
        _alert("LLMInstanceOverloaded", "warning", ov, cluster="c1", model="m1", pool="stable", instance="e1:8000"),
        _alert("GPUXidError", "warning", gpu, cluster="c1", node="n1", gpu="0", xid="13"),
    ]
    active = [
        # same alerts in another cluster, for another model, on another GPU: not explained by the sources
        _alert("LLMInstanceTTFTP99High", "warning", cb, cluster="c2", model="m1", instance="e1:8000", pool="stable"),
        # Cold start vs cascade: new instances thrashing in another pool or model (8 new of 24
        # ejected while cold raise no cascade of their own) stay visible next to a cascade elsewhere.
        _alert("LLMColdStartThrash", "warning", cb, cluster="c1", model="m1", instance="e30:8000", pool="canary"),
        _alert("LLMColdStartThrash", "warning", cb, cluster="c1", model="m2", instance="e40:8000", pool="stable"),
        _alert("LLMInstanceTTFTP99High", "warning", cb, cluster="c1", model="m2", instance="e41:8000", pool="stable"),
        _alert("LLMInstanceOverloaded", "warning", ov, cluster="c1", model="m2", pool="stable", instance="e9:8000"),
        _alert("GPUXidError", "warning", gpu, cluster="c1", node="n2", gpu="0", xid="13"),
        # a warning of another alert on the same GPU is not silenced by the XID page
        _alert("GPUThrottled", "warning", gpu, cluster="c1", node="n1", gpu="0", reason="hw_thermal"),
    ]
    _post(alertmanager, sources + inhibited + active)
    key = lambda alert: tuple(sorted(alert["labels"].items()))  # noqa: E731
    deadline = time.monotonic() + 15
    while True:
        states = _states(alertmanager)
        done = all(key(a) in states for a in sources + inhibited + active) and all(
            states[key(a)] for a in inhibited)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for alert in inhibited:
        assert states.get(key(alert)), f"not inhibited: {alert['labels']}"
    for alert in sources + active:
        assert states.get(key(alert)) == [], f"wrongly inhibited: {alert['labels']}"

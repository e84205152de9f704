"""The GPU alerts fire on what the dcgm-exporter source emits (promtool over the normalizer's series).

Each minute's dcgm-exporter text is the default-counters fixture with that minute's values; the
series are what :mod:`infersight.collectors.gpu.dcgm_collector` makes of it.
"""

from __future__ import annotations

import re

import pytest

from infersight.alerts.model import Expected
from infersight.alerts.rules.common import engine_labels
from infersight.alerts.series import ramp
from infersight.collectors.gpu.dcgm import parse
from infersight.collectors.gpu.dcgm_collector import gpu_series
from infersight.signals import engine
from tests.alerts.from_sources import alert, input_series, run_cases
from tests.collectors.test_gpu_dcgm import DEFAULT
from tests.conftest import require_tool

pytestmark = pytest.mark.real  # promtool

NODE = "gpu-node-01"
GPU0 = {"node": NODE, "gpu": "0", "uuid": "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b",
        "gpu_model": "NVIDIA H100 80GB HBM3"}
GPU1_UUID = "GPU-15338f3e-5fd9-962d-921a-979b820520f0"
DRAM_GPU0 = re.compile(r'^(DCGM_FI_PROF_DRAM_ACTIVE\{gpu="0",[^}]*\}) \S+$', re.M)


def with_sm_active(text: str, value: float) -> str:
    """GPU 0 with DCGM_FI_PROF_SM_ACTIVE, the counter a custom CSV must add for the bandwidth alert."""
    labels = DRAM_GPU0.search(text).group(1)[len("DCGM_FI_PROF_DRAM_ACTIVE"):]
    return text + ("# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.\n"
                   "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n"
                   f"DCGM_FI_PROF_SM_ACTIVE{labels} {value}\n")


def minutes(texts: list[str]) -> list[list]:
    return [[s for g in parse(text) for s in gpu_series(g)] for text in texts]


def test_bandwidth_saturation_and_xid_fire_from_dcgm_series(tmp_path):
    require_tool("promtool")
    saturated = DRAM_GPU0.sub(r"\1 0.95", DEFAULT)  # decode-bound: DRAM interface busy 95 % of cycles
    queue = ramp(engine.REQUESTS_WAITING, engine_labels(node=NODE), 0, 2, 30)
    bandwidth = alert("GPUMemoryBandwidthSaturated")
    full = input_series(minutes([with_sm_active(saturated, 0.2)] * 30))
    default_only = input_series(minutes([saturated] * 30))

    xid = alert("GPUXidError", "critical")
    no_xid = DEFAULT.replace('err_code="79",err_msg="GPU has fallen off the bus"} 79',
                             'err_code="0",err_msg="No Error"} 0')
    falls_off = input_series(minutes([no_xid] * 12 + [DEFAULT] * 8))
    already_there = input_series(minutes([DEFAULT] * 20))
    xid_labels = {"node": NODE, "gpu": "1", "uuid": GPU1_UUID, "gpu_model": "NVIDIA H100 80GB HBM3", "xid": "79"}

    result = run_cases(tmp_path, [
        ("dcgm: bandwidth full, SM_ACTIVE enabled, queue growing", bandwidth, [*full, queue], 25,
         [Expected({"node": NODE, "gpu": "0"}, 0.95)]),
        # Default counters have no SM activity: the alert cannot tell bandwidth-bound from busy, and stays silent.
        ("dcgm: default counters, no SM activity", bandwidth, [*default_only, queue], 25, []),
        ("dcgm: last XID turns 79", xid, falls_off, 15, [Expected(xid_labels)]),
        ("dcgm: XID 79 already the last value when the series start", xid, already_there, 15, []),
    ])
    assert result.ok, result.output
    assert result.output.count("SUCCESS") == 1

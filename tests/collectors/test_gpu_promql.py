"""The energy-per-token PromQL is built from catalog signals; bad join labels are refused."""

from __future__ import annotations

import pytest

from infersight.collectors.gpu.promql import energy_per_token
from infersight.signals import engine, gpu


def test_per_gpu_join_uses_catalog_names_and_node_gpu():
    query = energy_per_token()
    assert query == (f"sum by (node, gpu) (rate({gpu.ENERGY.name}[5m])) / on (node, gpu) "
                     f"(sum by (node, gpu) (rate({engine.GENERATION_TOKENS.name}[5m])) > 0)")


def test_matchers_narrow_both_sides_and_fleet_form_has_no_join():
    query = energy_per_token(window="1h", by=(), node="n1")
    assert query == (f'sum(rate({gpu.ENERGY.name}{{node="n1"}}[1h])) / '
                     f'(sum(rate({engine.GENERATION_TOKENS.name}{{node="n1"}}[1h])) > 0)')


@pytest.mark.parametrize("kwargs", [{"by": ("gpu_model",)}, {"by": ("node", "model")}, {"uuid": "GPU-1"}])
def test_labels_only_one_side_carries_are_refused(kwargs):
    with pytest.raises(ValueError, match="cannot join GPU and engine series"):
        energy_per_token(**kwargs)

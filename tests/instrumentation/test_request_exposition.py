"""The request metrics render their own text (instrumentation/series.py): it must be what
prometheus_client writes for the same series, what its parser and promtool read, and what every
other reader of the registry (samples, OpenMetrics, name filters) sees."""

from __future__ import annotations

import random
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from infersight.exposition import RenderedFamily, generate
from infersight.instrumentation.metrics import RequestMetrics
from infersight.instrumentation.series import Family
from infersight.signals.catalog import Kind
from tests.conftest import require_tool

# Label values a parser must get back exactly: quotes, backslashes, a newline, a percent sign
# (the templates are %-formatted), UTF-8, and the empty value.
TRICKY = ['say "hi"', "C:\\models\\", "two\nlines", "100% cached", "modèle-ü", ""]


def twin_registries(seed: int, large: bool = False) -> tuple[CollectorRegistry, CollectorRegistry]:
    """Our families and prometheus_client's own metrics for the same signals, fed the same updates."""
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    families = [value for value in vars(RequestMetrics(ours)).values() if isinstance(value, Family)]
    native = [family.signal.register(theirs) for family in families]
    rng = random.Random(seed)
    values = ["m-a", "10.0.0.1:8000", "stable", "cache_aware", *TRICKY]
    for _ in range(400):
        index = rng.randrange(len(families))
        family, metric = families[index], native[index]
        labels = tuple(rng.choice(values) for _ in family.labelnames)
        cell, child = family.cell(labels), metric.labels(*labels)
        if family.signal.kind is Kind.HISTOGRAM:
            value = rng.choice([*family.bounds, rng.uniform(0, family.bounds[-1] * 1.5), 0.0])
            family.observe(cell, value)
            child.observe(value)
        else:
            amount = rng.randrange(10**7, 10**9) if large else rng.randrange(0, 50)
            if family.signal.kind is Kind.GAUGE and rng.random() < 0.3:
                amount = -amount
            with family.lock:
                cell[0] += amount
            child.inc(amount)
    return ours, theirs


def parsed(text: str) -> list[tuple]:
    return [(family.name, family.type, family.documentation,
             [(s.name, tuple(sorted(s.labels.items())), s.value) for s in family.samples])
            for family in text_string_to_metric_families(text)]


def openmetrics(registry: CollectorRegistry, drop_created: bool = False) -> list[tuple]:
    out = []
    for family in parse_openmetrics(generate_openmetrics(registry).decode()):
        samples = [(s.name, tuple(sorted(s.labels.items())), s.value) for s in family.samples
                   if not (drop_created and s.name.endswith("_created"))]
        out.append((family.name, family.type, samples))
    return out


def test_the_text_is_byte_for_byte_what_prometheus_client_writes_for_its_own_metrics():
    ours, theirs = twin_registries(seed=1)
    text = generate(ours)
    assert text == generate(theirs)  # theirs rendered by prometheus_client (minus _created)
    assert b'model="say \\"hi\\""' in text and b'100% cached' in text and b"two\\nlines" in text


def test_large_values_read_the_same_to_a_parser():
    # Past 10^6 prometheus_client writes floats as 1.2345678e+07 and we write 12345678.0.
    ours, theirs = twin_registries(seed=2, large=True)
    assert parsed(generate(ours).decode()) == parsed(generate(theirs).decode())


def test_every_other_reader_gets_the_same_samples():
    ours, theirs = twin_registries(seed=3)
    # prometheus_client's own rendering of our registry builds the samples from the same snapshot.
    assert generate_latest(ours) == generate(theirs)
    assert openmetrics(ours) == openmetrics(theirs, drop_created=True)
    name = "llm_requests_total"
    filtered = generate_latest(ours.restricted_registry([name])).decode()
    assert "llm_requests_total{" in filtered and "llm_time_to_first_token" not in filtered
    labels = {"model": "m-a", "instance": "10.0.0.1:8000", "pool": "stable", "strategy": "cache_aware"}
    for sample in ("llm_time_to_first_token_seconds_count", "llm_output_tokens_total", "llm_requests_in_flight"):
        assert ours.get_sample_value(sample, labels) == theirs.get_sample_value(sample, labels), sample


def test_a_scrape_reads_each_cell_once_and_a_filter_falls_back_to_samples():
    registry = CollectorRegistry()
    metrics = RequestMetrics(registry)
    bundle = metrics.bundle("m", "i", "p", "s")
    family = next(f for f in registry.collect() if f.name == "llm_output_tokens")
    assert isinstance(family, RenderedFamily)
    with metrics.lock:
        bundle.output_tokens[0] += 7  # after the collection: not in this snapshot
    assert b'llm_output_tokens_total{instance="i",model="m",pool="p",strategy="s"} 0.0' in family.exposition()
    family.samples = [s for s in family.samples if s.labels["model"] == "nobody"]  # a filter replaces them
    assert family.exposition() is None  # generate() then renders the replaced samples
    assert "llm_output_tokens_total{" not in generate_latest(_Just(family)).decode()


class _Just:
    def __init__(self, family) -> None:
        self.family = family

    def collect(self):
        yield self.family


@pytest.mark.real
def test_promtool_accepts_the_exposition(tmp_path):
    promtool = require_tool("promtool")
    ours, _ = twin_registries(seed=4)
    path = tmp_path / "metrics.prom"
    path.write_bytes(generate(ours))
    with path.open("rb") as stdin:
        result = subprocess.run([promtool, "check", "metrics"], stdin=stdin, capture_output=True, text=True,
                                timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr  # parses, and no lint finding
    path.write_bytes(generate(ours).replace(b"} 1.0\n", b"} one\n", 1))  # the check can fail
    with path.open("rb") as stdin:
        broken = subprocess.run([promtool, "check", "metrics"], stdin=stdin, capture_output=True, timeout=60)
    assert broken.returncode != 0

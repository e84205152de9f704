"""Retry backoff: exponential, capped, jittered (so many receivers do not retry in lockstep)."""

from __future__ import annotations

from infersight.pipelines.receiver.metrics import PipelineMetrics
from infersight.pipelines.receiver.spool import Spool
from infersight.pipelines.receiver.writer import Writer, WriterOptions, batch_token


def test_backoff_doubles_is_capped_and_jittered(tmp_path):
    options = WriterOptions(retry_initial_seconds=0.1, retry_max_seconds=1.0)
    writer = Writer(sink=None, spool=Spool(tmp_path, 1000), options=options, metrics=PipelineMetrics())
    for attempt, ceiling in enumerate((0.1, 0.2, 0.4, 0.8, 1.0, 1.0)):
        delays = [writer._backoff(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (attempt, min(delays), max(delays))
        assert len({round(d, 6) for d in delays}) > 100  # jittered, not one fixed value


def test_batch_token_is_stable_and_content_bound():
    assert batch_token(b"abc") == batch_token(b"abc")
    assert batch_token(b"abc") != batch_token(b"abd")
    assert len(batch_token(b"")) == 32

"""The session's real vLLM: one server for every test in tests/engines/, stopped by its PID at the end.

It skips on a laptop without ``.venv-vllm`` (``make vllm-venv``) and fails under ``CI=true``. vLLM
exports its own spans over OTLP/gRPC (``--otlp-traces-endpoint``) to our receiver, started first on a
free port and writing into a database of the session's ClickHouse (:func:`vllm_trace_store`).
Tests marked ``stops_engine`` run last in the session: they stop it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import IN_CI, free_port
from tests.engines import vllm_server
from tests.pipelines.receiver_payloads import migrate, start_receiver


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.real)  # every test here runs the real vLLM
    # The engine-stopping tests go last, so every other real-vLLM test still has its engine.
    items.sort(key=lambda item: item.get_closest_marker("stops_engine") is not None)


def require_vllm() -> None:
    why = vllm_server.missing()
    if why:
        if IN_CI:
            pytest.fail(why + " -- CI must install it (make test does)")
        pytest.skip(why)


@dataclass(frozen=True)
class TraceStore:
    """Where the session's vLLM sends its spans: our receiver (``receiver``) into ``database``."""

    database: str
    receiver: object  # a started ReceiverThread

    @property
    def otlp_endpoint(self) -> str:
        return "http://" + self.receiver.grpc_target


@pytest.fixture(scope="session")
def vllm_trace_store(clickhouse_server, tmp_path_factory):
    """Our receiver on a free port, started before vLLM and stopped after it, so no span is lost."""
    require_vllm()
    database = f"vllm_traces_{os.getpid()}"
    admin = clickhouse_server.client()
    admin.command(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    migrate(clickhouse_server, database)
    receiver = start_receiver(clickhouse_server.dsn(database), tmp_path_factory.mktemp("vllm-spool"))
    yield TraceStore(database, receiver)
    receiver.stop()
    admin.command(f"DROP DATABASE IF EXISTS `{database}` SYNC")
    admin.close()


@pytest.fixture(scope="session")
def vllm_session(tmp_path_factory, vllm_trace_store):
    require_vllm()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = vllm_server.VLLMServer(
        free_port(), log, extra_args=("--otlp-traces-endpoint", vllm_trace_store.otlp_endpoint),
        # vLLM's tracer is the OTel SDK: it names the service from OTEL_SERVICE_NAME, and its batch
        # processor waits 5 s by default before it exports (half a second is enough here).
        env={"OTEL_SERVICE_NAME": vllm_server.SERVICE_NAME, "OTEL_BSP_SCHEDULE_DELAY": "500"})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def vllm(vllm_session):
    """The running session server; a test that finds it stopped fails with its log."""
    if not vllm_session.running:
        pytest.fail("the session's vLLM is no longer running:\n" + vllm_session.log_tail())
    return vllm_session

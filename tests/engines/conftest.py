"""The session's real vLLM: one server for every test in tests/engines/, stopped by its PID at the end.

It skips on a laptop without ``.venv-vllm`` (``make vllm-venv``) and fails under ``CI=true``. vLLM
exports its own spans over OTLP/gRPC to a port picked here (``VLLM_OTLP_PORT``); the tracing test
starts our receiver on it. Tests marked ``stops_engine`` run last in the session: they stop it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import IN_CI, free_port
from tests.engines import vllm_server


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


@pytest.fixture(scope="session")
def vllm_otlp_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def vllm_session(tmp_path_factory, vllm_otlp_port):
    require_vllm()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = vllm_server.VLLMServer(free_port(), log, extra_args=(
        "--otlp-traces-endpoint", f"http://127.0.0.1:{vllm_otlp_port}"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def vllm(vllm_session):
    """The running session server; a test that finds it stopped fails with its log."""
    if not vllm_session.running:
        pytest.fail("the session's vLLM is no longer running:\n" + vllm_session.log_tail())
    return vllm_session

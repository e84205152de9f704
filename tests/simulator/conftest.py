"""Start the session's scenarios early, on the cores the test session leaves idle (see runs.py)."""

from __future__ import annotations

import shutil

from tests.conftest import FAST_LANE
from tests.simulator import runs


def _reads_runs(item) -> bool:
    module = getattr(item, "module", None)
    return getattr(module, "recorded", None) is runs.recorded or getattr(module, "verdict", None) is runs.verdict


def pytest_collection_finish(session) -> None:
    if session.config.option.collectonly:
        return
    readers = [item for item in session.items if _reads_runs(item)]
    if not readers:
        return
    names: set[str] = set()
    for item in readers:
        name = getattr(getattr(item, "callspec", None), "params", {}).get("name")
        if name is None:  # a test over every scenario (the README table)
            names = set(runs.SCENARIOS)
            break
        names.add(name)
    judge = not FAST_LANE and shutil.which("promtool") is not None and any(
        getattr(item.module, "verdict", None) is runs.verdict for item in readers)
    runs.prefetch([n for n in runs.SCENARIOS if n in names], judge)


def pytest_sessionfinish(session, exitstatus) -> None:
    runs.shutdown()
